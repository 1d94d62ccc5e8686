//! Which audio format a body is in. The response's content type is often just
//! `application/octet-stream`, so the request's `response_format` and the first bytes count too.

use serde::{Deserialize, Serialize};

/// An audio container or encoding, as far as tokentap tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AudioFormat {
    /// Raw little-endian PCM without a header (OpenAI `pcm`: 24 kHz, 16-bit, mono).
    Pcm,
    Wav,
    Mp3,
    Opus,
    Aac,
    Flac,
    /// Audio of a kind not named above.
    Other,
}

impl AudioFormat {
    /// OpenAI's `response_format` values for speech.
    pub fn from_response_format(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "pcm" | "pcm16" | "s16le" => Some(Self::Pcm),
            "wav" | "wave" => Some(Self::Wav),
            "mp3" | "mpeg" => Some(Self::Mp3),
            "opus" | "ogg" => Some(Self::Opus),
            "aac" => Some(Self::Aac),
            "flac" => Some(Self::Flac),
            _ => None,
        }
    }

    /// A content type that names the format; `None` for generic ones (`application/octet-stream`).
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let mime = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match mime.as_str() {
            "audio/pcm" | "audio/l16" | "audio/raw" | "audio/x-raw" | "audio/s16le" => Some(Self::Pcm),
            "audio/wav" | "audio/x-wav" | "audio/wave" | "audio/vnd.wave" => Some(Self::Wav),
            "audio/mpeg" | "audio/mp3" | "audio/mpeg3" | "audio/x-mpeg-3" => Some(Self::Mp3),
            "audio/opus" | "audio/ogg" | "audio/webm" => Some(Self::Opus),
            "audio/aac" | "audio/x-aac" | "audio/mp4" => Some(Self::Aac),
            "audio/flac" | "audio/x-flac" => Some(Self::Flac),
            m if m.starts_with("audio/") => Some(Self::Other),
            _ => None,
        }
    }

    /// Formats that say so in their first bytes. Raw PCM has no signature, and an MP3 frame sync
    /// is too weak a sign on its own, so neither is sniffed.
    pub fn sniff(prefix: &[u8]) -> Option<Self> {
        if prefix.len() >= 12 && &prefix[..4] == b"RIFF" && &prefix[8..12] == b"WAVE" {
            Some(Self::Wav)
        } else if prefix.starts_with(b"ID3") {
            Some(Self::Mp3)
        } else if prefix.starts_with(b"OggS") {
            Some(Self::Opus)
        } else if prefix.starts_with(b"fLaC") {
            Some(Self::Flac)
        } else {
            None
        }
    }

    /// The format of a speech body: a signature in the first bytes wins, then a specific content
    /// type, then the request's `response_format`, then OpenAI's default (mp3).
    pub fn resolve(prefix: &[u8], content_type: Option<&str>, response_format: Option<&str>) -> (Self, FormatSource) {
        if let Some(f) = Self::sniff(prefix) {
            return (f, FormatSource::Signature);
        }
        if let Some(f) = content_type.and_then(Self::from_content_type) {
            return (f, FormatSource::ContentType);
        }
        if let Some(f) = response_format.and_then(Self::from_response_format) {
            return (f, FormatSource::ResponseFormat);
        }
        (Self::Mp3, FormatSource::ApiDefault)
    }
}

/// Where the format was learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormatSource {
    Signature,
    ContentType,
    ResponseFormat,
    /// Nothing said: OpenAI's default `response_format` (mp3) was assumed.
    ApiDefault,
}

/// Layout of PCM samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcmSpec {
    pub sample_rate_hz: u32,
    pub channels: u16,
    pub bits_per_sample: u16,
    /// IEEE float samples (WAV format tag 3) rather than integers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub float: bool,
}

impl PcmSpec {
    /// OpenAI's `pcm`: 24 kHz, 16-bit signed little-endian, mono.
    pub const OPENAI_PCM: PcmSpec = PcmSpec { sample_rate_hz: 24_000, channels: 1, bits_per_sample: 16, float: false };

    /// Bytes per frame (one sample of every channel).
    pub fn frame_bytes(&self) -> usize {
        usize::from(self.channels) * usize::from(self.bits_per_sample / 8)
    }

    /// Whether the samples can be decoded (8/16/24/32-bit integers, 32-bit float, 1–16 channels,
    /// a sane rate).
    pub fn decodable(&self) -> bool {
        let bits_ok =
            if self.float { self.bits_per_sample == 32 } else { matches!(self.bits_per_sample, 8 | 16 | 24 | 32) };
        bits_ok && (1..=16).contains(&self.channels) && (1_000..=768_000).contains(&self.sample_rate_hz)
    }

    /// `audio/L16; rate=16000; channels=2` style parameters over OpenAI's defaults.
    pub fn from_content_type_params(content_type: Option<&str>) -> PcmSpec {
        let mut spec = Self::OPENAI_PCM;
        for param in content_type.unwrap_or("").split(';').skip(1) {
            let Some((k, v)) = param.split_once('=') else { continue };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "rate" => {
                    if let Ok(rate) = v.parse() {
                        spec.sample_rate_hz = rate;
                    }
                }
                "channels" => {
                    if let Ok(ch) = v.parse() {
                        spec.channels = ch;
                    }
                }
                _ => {}
            }
        }
        spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_order() {
        let wav = b"RIFF\x24\0\0\0WAVEfmt ";
        assert_eq!(
            AudioFormat::resolve(wav, Some("application/octet-stream"), Some("mp3")),
            (AudioFormat::Wav, FormatSource::Signature)
        );
        assert_eq!(
            AudioFormat::resolve(b"\0\0\0\0", Some("audio/pcm"), Some("mp3")),
            (AudioFormat::Pcm, FormatSource::ContentType)
        );
        assert_eq!(
            AudioFormat::resolve(b"\0\0\0\0", Some("application/octet-stream"), Some("pcm")),
            (AudioFormat::Pcm, FormatSource::ResponseFormat)
        );
        assert_eq!(AudioFormat::resolve(b"\xff\xfb", None, None), (AudioFormat::Mp3, FormatSource::ApiDefault));
        assert_eq!(AudioFormat::resolve(b"ID3\x04", None, Some("pcm")).0, AudioFormat::Mp3);
        assert_eq!(AudioFormat::from_content_type("audio/x-something"), Some(AudioFormat::Other));
        assert_eq!(AudioFormat::from_content_type("text/plain"), None);
    }

    #[test]
    fn pcm_parameters_from_the_content_type() {
        let spec = PcmSpec::from_content_type_params(Some("audio/L16; rate=16000; channels=2"));
        assert_eq!(spec, PcmSpec { sample_rate_hz: 16_000, channels: 2, bits_per_sample: 16, float: false });
        assert_eq!(PcmSpec::from_content_type_params(Some("audio/pcm")), PcmSpec::OPENAI_PCM);
        assert_eq!(PcmSpec::OPENAI_PCM.frame_bytes(), 2);
        assert!(!PcmSpec { sample_rate_hz: 0, ..PcmSpec::OPENAI_PCM }.decodable());
        assert!(!PcmSpec { bits_per_sample: 12, ..PcmSpec::OPENAI_PCM }.decodable());
    }
}
