//! The enumerated values of a report, each with one name (`as_str`), which the `serde` feature
//! also reads and writes.

use std::fmt;

/// A name that is none of an enum's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    pub given: String,
    pub expected: &'static [&'static str],
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not one of {}", self.given, self.expected.join(", "))
    }
}

impl std::error::Error for UnknownName {}

macro_rules! protocol_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const VARIANTS: &'static [$name] = &[$($name::$variant),+];
            /// Every variant's name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The variant's name in a report.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = UnknownName;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                $name::VARIANTS
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == text)
                    .ok_or_else(|| UnknownName { given: text.to_string(), expected: $name::NAMES })
            }
        }

        #[cfg(feature = "serde")]
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        #[cfg(feature = "serde")]
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                text.parse().map_err(|_| serde::de::Error::unknown_variant(&text, $name::NAMES))
            }
        }
    };
}

protocol_enum! {
    /// How the body carries its answer text, as the probe read it (`fetch.text_format`;
    /// docs/metrics.md, "Answer characters in the browser").
    pub enum TextFormat {
        /// Server-sent events: JSON `data:` (OpenAI, Anthropic, the AI SDK UI message stream, …) or
        /// plain text `data:`.
        Sse = "sse",
        /// One JSON object per line.
        Ndjson = "ndjson",
        /// The AI SDK data stream protocol (`0:"text"` lines).
        DataStream = "data_stream",
        /// The body is the answer text itself.
        PlainText = "plain_text",
        /// One event per WebSocket message: JSON read like an SSE event's data, or text.
        Messages = "messages",
    }
}

protocol_enum! {
    /// How the page received its stream (`fetch.transport`; absent: `fetch`).
    pub enum Transport {
        /// `fetch`, its body read in any way (a reader, `text()`, async iteration, piping).
        Fetch = "fetch",
        /// An `EventSource`: one read per event the browser dispatched.
        EventSource = "event_source",
        /// A WebSocket to the app's own server relaying the answer: one read per message.
        WebSocket = "websocket",
    }
}

protocol_enum! {
    /// Where a playback was observed (`audio[].kind`).
    pub enum AudioKind {
        /// `AudioContext.getOutputTimestamp()`, mapped to the performance timeline.
        AudioContext = "audio_context",
        /// An `<audio>`/`<video>` element's `playing` event plus the latency estimate.
        MediaElement = "media_element",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for v in TextFormat::VARIANTS {
            assert_eq!(v.as_str().parse::<TextFormat>(), Ok(*v));
        }
        for v in Transport::VARIANTS {
            assert_eq!(v.as_str().parse::<Transport>(), Ok(*v));
        }
        for v in AudioKind::VARIANTS {
            assert_eq!(v.as_str().parse::<AudioKind>(), Ok(*v));
        }
        assert_eq!(
            "html".parse::<TextFormat>().unwrap_err().to_string(),
            "\"html\" is not one of sse, ndjson, data_stream, plain_text, messages"
        );
    }
}
