//! One name per enum variant: [`named_enum!`](crate::named_enum) declares an enum whose serde name,
//! `as_str`, `FromStr` and list of variants all come from one string literal per variant, so the
//! name a record writes and the name code compares against cannot drift apart.

use std::fmt;

/// An enum declared with [`named_enum!`](crate::named_enum).
pub trait Named: Copy + 'static {
    /// Every variant, in declaration order.
    const VARIANTS: &'static [Self];
    /// The variant's name: the one serde writes and reads.
    fn as_str(self) -> &'static str;
}

/// A name that is none of an enum's variants (the error of the generated `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    pub given: String,
    pub expected: Vec<&'static str>,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not one of {}", self.given, self.expected.join(", "))
    }
}

impl std::error::Error for UnknownName {}

/// The variant named `text`.
pub fn parse_name<T: Named>(text: &str) -> Result<T, UnknownName> {
    T::VARIANTS.iter().copied().find(|v| v.as_str() == text).ok_or_else(|| UnknownName {
        given: text.to_string(),
        expected: T::VARIANTS.iter().map(|v| v.as_str()).collect(),
    })
}

/// The variants whose `as_str` differs from the name serde writes (for a test: none should).
pub fn serialized_name_mismatches<T: Named + serde::Serialize>() -> Vec<String> {
    T::VARIANTS
        .iter()
        .filter_map(|v| {
            let written = serde_json::to_value(v).ok();
            let expected = serde_json::Value::String(v.as_str().to_string());
            (written.as_ref() != Some(&expected)).then(|| format!("{} is serialised as {written:?}", v.as_str()))
        })
        .collect()
}

/// The variants that serde does not read back from their `as_str` (for a test: none should).
pub fn deserialized_name_mismatches<T: Named + serde::de::DeserializeOwned + PartialEq>() -> Vec<String> {
    T::VARIANTS
        .iter()
        .filter(|v| serde_json::from_value::<T>(serde_json::Value::String(v.as_str().to_string())).ok() != Some(**v))
        .map(|v| format!("{} is not read back", v.as_str()))
        .collect()
}

/// Declares an enum with one name per variant, used by serde (`#[serde(rename = ...)]` on each
/// variant) and by the generated `as_str`, `FromStr`, `VARIANTS` and [`Named`] impl. The enum must
/// derive `Serialize` or `Deserialize` (the rename attribute is serde's) and `Clone, Copy`.
///
/// ```
/// use serde::Serialize;
/// tokentap_analysis::named_enum! {
///     #[derive(Debug, Clone, Copy, PartialEq, Serialize)]
///     pub enum Side {
///         /// The client.
///         Client = "client",
///         Upstream = "upstream",
///     }
/// }
/// assert_eq!(Side::Upstream.as_str(), "upstream");
/// assert_eq!("client".parse::<Side>(), Ok(Side::Client));
/// assert_eq!(serde_json::to_string(&Side::Client).unwrap(), "\"client\"");
/// ```
#[macro_export]
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const VARIANTS: &'static [$name] = &[$($name::$variant),+];

            /// The variant's name, as records write it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl $crate::names::Named for $name {
            const VARIANTS: &'static [Self] = $name::VARIANTS;
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::names::UnknownName;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                $crate::names::parse_name(text)
            }
        }
    };
}

#[cfg(test)]
#[allow(unreachable_pub)]
mod tests {
    use serde::{Deserialize, Serialize};

    crate::named_enum! {
        #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
        enum Sample {
            /// Documented.
            First = "first",
            SecondOne = "second_one",
        }
    }

    #[test]
    fn names_serde_and_from_str_agree() {
        assert_eq!(Sample::VARIANTS, &[Sample::First, Sample::SecondOne]);
        assert_eq!(Sample::SecondOne.as_str(), "second_one");
        assert_eq!("second_one".parse::<Sample>(), Ok(Sample::SecondOne));
        let err = "third".parse::<Sample>().unwrap_err().to_string();
        assert_eq!(err, "\"third\" is not one of first, second_one");
        assert!(super::serialized_name_mismatches::<Sample>().is_empty());
        assert!(super::deserialized_name_mismatches::<Sample>().is_empty());
    }
}
