//! MP3: frame headers give the audio duration received as bytes arrive (no decoding), and a
//! decoder (symphonia, pure Rust) gives the samples up to the first audible one. Decoding stops at
//! the onset, so the cost is the leading silence plus 50 ms, whatever the length of the answer.

use std::io::Cursor;

use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::{MediaSourceStream, MediaSourceStreamOptions};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use super::onset::OnsetDetector;

/// One MPEG audio frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub sample_rate_hz: u32,
    pub samples: u32,
    pub length: usize,
    pub channels: u16,
    /// Bytes of Layer III side information (where a Xing/Info tag would start after it).
    side_info: usize,
}

const BITRATES_V1_L1: [u32; 15] = [0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448];
const BITRATES_V1_L2: [u32; 15] = [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384];
const BITRATES_V1_L3: [u32; 15] = [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320];
const BITRATES_V2_L1: [u32; 15] = [0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256];
const BITRATES_V2_L23: [u32; 15] = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];

/// Parses a frame header at the start of `b` (at least 4 bytes).
pub(crate) fn frame_header(b: &[u8]) -> Option<FrameHeader> {
    if b.len() < 4 || b[0] != 0xFF || b[1] & 0xE0 != 0xE0 {
        return None;
    }
    let version = (b[1] >> 3) & 3; // 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
    let layer = (b[1] >> 1) & 3; // 3: I, 2: II, 1: III
    if version == 1 || layer == 0 {
        return None;
    }
    let bitrate_index = usize::from(b[2] >> 4);
    let rate_index = usize::from((b[2] >> 2) & 3);
    if bitrate_index == 0 || bitrate_index == 15 || rate_index == 3 {
        return None; // free format and reserved values are not followed
    }
    let padding = u32::from((b[2] >> 1) & 1);
    let mpeg1 = version == 3;
    let base_rate = [44_100, 48_000, 32_000][rate_index];
    let sample_rate_hz = match version {
        3 => base_rate,
        2 => base_rate / 2,
        _ => base_rate / 4,
    };
    let kbps = match (mpeg1, layer) {
        (true, 3) => BITRATES_V1_L1,
        (true, 2) => BITRATES_V1_L2,
        (true, _) => BITRATES_V1_L3,
        (false, 3) => BITRATES_V2_L1,
        (false, _) => BITRATES_V2_L23,
    }[bitrate_index];
    let bitrate = kbps * 1000;
    let (samples, length) = match layer {
        3 => (384, ((12 * bitrate / sample_rate_hz + padding) * 4) as usize),
        2 => (1152, (144 * bitrate / sample_rate_hz + padding) as usize),
        _ if mpeg1 => (1152, (144 * bitrate / sample_rate_hz + padding) as usize),
        _ => (576, (72 * bitrate / sample_rate_hz + padding) as usize),
    };
    let channels = if (b[3] >> 6) == 3 { 1 } else { 2 };
    let side_info = match (mpeg1, channels) {
        (true, 1) => 17,
        (true, _) => 32,
        (false, 1) => 9,
        (false, _) => 17,
    };
    (length >= 4).then_some(FrameHeader { sample_rate_hz, samples, length, channels, side_info })
}

/// Counts the audio in complete frames as bytes arrive, skipping an ID3v2 tag and the Xing/Info
/// frame encoders put first (it holds no audio).
#[derive(Debug, Default)]
pub(crate) struct FrameScanner {
    at: usize,
    started: bool,
    pub frames: u64,
    pub samples: u64,
    pub sample_rate_hz: Option<u32>,
    /// Bytes skipped looking for a frame sync (garbage or an unsupported header).
    pub skipped: u64,
    /// Encoder delay and end padding (samples) from a LAME-style tag in the first frame.
    pub encoder_delay: Option<u32>,
    pub encoder_padding: Option<u32>,
}

impl FrameScanner {
    /// Scans what is new in `bytes` (all bytes so far).
    pub(super) fn scan(&mut self, bytes: &[u8]) {
        if !self.started {
            if bytes.len() < 10 {
                return;
            }
            if bytes.starts_with(b"ID3") {
                let size = bytes[6..10].iter().fold(0usize, |n, &b| (n << 7) | usize::from(b & 0x7F));
                let footer = if bytes[5] & 0x10 != 0 { 10 } else { 0 };
                self.at = 10 + size + footer;
            }
            self.started = true;
        }
        while self.at + 4 <= bytes.len() {
            let Some(h) = frame_header(&bytes[self.at..]) else {
                self.at += 1;
                self.skipped += 1;
                continue;
            };
            if self.at + h.length > bytes.len() {
                return;
            }
            let frame = &bytes[self.at..self.at + h.length];
            let tag_at = 4 + h.side_info;
            let is_tag = self.frames == 0
                && frame.len() >= tag_at + 4
                && matches!(&frame[tag_at..tag_at + 4], b"Xing" | b"Info" | b"VBRI");
            self.frames += 1;
            if is_tag {
                self.read_encoder_tag(frame, tag_at);
            } else {
                self.samples += u64::from(h.samples);
                self.sample_rate_hz.get_or_insert(h.sample_rate_hz);
            }
            self.at += h.length;
        }
    }
}

impl FrameScanner {
    /// The LAME tag after a Xing/Info header (also written by ffmpeg as "Lavc"/"Lavf"): encoder
    /// delay and padding, 12 bits each, 21 bytes into it.
    fn read_encoder_tag(&mut self, frame: &[u8], tag_at: usize) {
        let Some(flags) = frame.get(tag_at + 4..tag_at + 8) else { return };
        let flags = u32::from_be_bytes([flags[0], flags[1], flags[2], flags[3]]);
        let mut p = tag_at + 8;
        for (bit, len) in [(1, 4), (2, 4), (4, 100), (8, 4)] {
            if flags & bit != 0 {
                p += len;
            }
        }
        let Some(lame) = frame.get(p..p + 24) else { return };
        if !matches!(&lame[..4], b"LAME" | b"Lavc" | b"Lavf" | b"GOGO") {
            return;
        }
        self.encoder_delay = Some((u32::from(lame[21]) << 4) | (u32::from(lame[22]) >> 4));
        self.encoder_padding = Some(((u32::from(lame[22]) & 0x0F) << 8) | u32::from(lame[23]));
    }

    /// Samples at the start of the decoder output that precede the audio: the encoder's delay
    /// plus the decoder's, when the tag says; 0 when it does not.
    pub(super) fn leading_delay(&self) -> u64 {
        self.encoder_delay.map_or(0, |d| u64::from(d + DECODER_DELAY))
    }

    /// Samples at the end that follow the audio (the encoder's padding minus the decoder delay).
    pub(super) fn trailing_padding(&self) -> u64 {
        self.encoder_padding.map_or(0, |p| u64::from(p.saturating_sub(DECODER_DELAY)))
    }
}

/// What decoding up to the onset found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mp3Onset {
    /// Onset position in samples (per channel) of the raw decoder output.
    pub onset: Option<u64>,
    pub sample_rate_hz: u32,
}

/// The decoder's own delay (samples), added to the encoder's by every standard MP3 decoder.
pub(crate) const DECODER_DELAY: u32 = 529;

/// Decodes until the first audible sample. `None` when the bytes do not decode as MP3.
pub(crate) fn decode_onset(bytes: Vec<u8>) -> Option<Mp3Onset> {
    let source = MediaSourceStream::new(Box::new(Cursor::new(bytes)), MediaSourceStreamOptions::default());
    let mut hint = Hint::new();
    hint.with_extension("mp3");
    // Raw decoder output: the caller removes the encoder and decoder delay it read from the tag.
    let format_options = FormatOptions { enable_gapless: false, ..FormatOptions::default() };
    let probed =
        symphonia::default::get_probe().format(&hint, source, &format_options, &MetadataOptions::default()).ok()?;
    let mut format = probed.format;
    let track = format.tracks().iter().find(|t| t.codec_params.codec != CODEC_TYPE_NULL)?.clone();
    let sample_rate_hz = track.codec_params.sample_rate?;

    let mut decoder = symphonia::default::get_codecs().make(&track.codec_params, &DecoderOptions::default()).ok()?;
    let mut detector = OnsetDetector::new(sample_rate_hz);
    let mut buffer: Option<SampleBuffer<f32>> = None;
    let mut decoded_any = false;
    while let Ok(packet) = format.next_packet() {
        if packet.track_id() != track.id {
            continue;
        }
        let Ok(audio) = decoder.decode(&packet) else { continue };
        let spec = *audio.spec();
        let channels = spec.channels.count().max(1);
        let frames = audio.frames();
        let buf = match &mut buffer {
            Some(b) if b.capacity() >= frames * channels => b,
            _ => buffer.insert(SampleBuffer::new(audio.capacity() as u64, spec)),
        };
        buf.copy_interleaved_ref(audio);
        decoded_any = true;
        for frame in buf.samples().chunks_exact(channels) {
            let power = frame.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>() / channels as f64;
            detector.push(power);
        }
        if detector.onset_found() {
            break;
        }
    }
    decoded_any.then(|| Mp3Onset { onset: detector.finish(), sample_rate_hz })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_mpeg1_and_mpeg2_layer_iii() {
        // MPEG-1 Layer III, 128 kbps, 44.1 kHz, no padding, stereo: 417 bytes, 1152 samples.
        let h = frame_header(&[0xFF, 0xFB, 0x90, 0x00]).unwrap();
        assert_eq!((h.sample_rate_hz, h.samples, h.length, h.channels), (44_100, 1152, 417, 2));
        // MPEG-2 Layer III, 48 kbps, 24 kHz, mono: 144 bytes, 576 samples.
        let h = frame_header(&[0xFF, 0xF3, 0x64, 0xC4]).unwrap();
        assert_eq!((h.sample_rate_hz, h.samples, h.length, h.channels), (24_000, 576, 144, 1));
        assert_eq!(frame_header(&[0xFF, 0xFB, 0xF0, 0x00]), None, "bad bitrate");
        assert_eq!(frame_header(&[0xFF, 0xFB, 0x9C, 0x00]), None, "reserved rate");
        assert_eq!(frame_header(&[0x00, 0xFB, 0x90, 0x00]), None);
    }
}
