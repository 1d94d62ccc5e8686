//! The RIFF/WAVE header: sample layout and where the samples start. Streamed WAV often declares a
//! data size of 0 or 0xFFFFFFFF (unknown); then the size is whatever arrives.

use super::format::PcmSpec;

/// Longest header looked through for the `data` chunk.
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WavHeader {
    pub spec: PcmSpec,
    /// Offset of the first sample byte.
    pub data_offset: usize,
    /// Declared sample bytes; `None` when unknown (0 or 0xFFFFFFFF, as streaming writers put).
    pub data_len: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WavParse {
    NeedMore,
    Header(WavHeader),
    Invalid(&'static str),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses the header from the first bytes of the file.
pub(crate) fn parse_header(prefix: &[u8]) -> WavParse {
    if prefix.len() < 12 {
        let want: &[u8] = b"RIFF";
        let n = prefix.len().min(4);
        return if prefix[..n] == want[..n] { WavParse::NeedMore } else { WavParse::Invalid("no RIFF signature") };
    }
    if &prefix[..4] != b"RIFF" || &prefix[8..12] != b"WAVE" {
        return WavParse::Invalid("no RIFF/WAVE signature");
    }
    let mut at = 12;
    let mut spec = None;
    loop {
        if at >= MAX_HEADER_BYTES {
            return WavParse::Invalid("no data chunk in the first 64 KiB");
        }
        if prefix.len() < at + 8 {
            return WavParse::NeedMore;
        }
        let id = &prefix[at..at + 4];
        let size = u32_at(prefix, at + 4);
        let body = at + 8;
        if id == b"data" {
            let Some(spec) = spec else { return WavParse::Invalid("data chunk before the fmt chunk") };
            let data_len = (size != 0 && size != u32::MAX).then_some(size);
            return WavParse::Header(WavHeader { spec, data_offset: body, data_len });
        }
        if id == b"fmt " {
            if size < 16 {
                return WavParse::Invalid("fmt chunk shorter than 16 bytes");
            }
            if prefix.len() < body + 16 {
                return WavParse::NeedMore;
            }
            let mut tag = u16_at(prefix, body);
            let channels = u16_at(prefix, body + 2);
            let sample_rate_hz = u32_at(prefix, body + 4);
            let bits_per_sample = u16_at(prefix, body + 14);
            // WAVE_FORMAT_EXTENSIBLE: the real tag is the first two bytes of the sub-format GUID.
            if tag == 0xFFFE && size >= 40 {
                if prefix.len() < body + 26 {
                    return WavParse::NeedMore;
                }
                tag = u16_at(prefix, body + 24);
            }
            let float = match tag {
                1 => false,
                3 => true,
                _ => return WavParse::Invalid("not PCM or float samples (compressed WAV)"),
            };
            spec = Some(PcmSpec { sample_rate_hz, channels, bits_per_sample, float });
        }
        // Chunks are padded to an even size.
        let padded = size as usize + (size as usize & 1);
        at = body.saturating_add(padded);
    }
}

/// Decodes interleaved little-endian PCM frames into the mean power of each frame (the mean over
/// channels of the squared sample, full scale = 1.0), carrying a partial frame between calls.
#[derive(Debug)]
pub(crate) struct FramePower {
    spec: PcmSpec,
    partial: Vec<u8>,
}

impl FramePower {
    pub(super) fn new(spec: PcmSpec) -> Self {
        Self { spec, partial: Vec::with_capacity(spec.frame_bytes()) }
    }

    /// Calls `out` with each complete frame's power. Returns the number of complete frames.
    pub(super) fn push(&mut self, mut bytes: &[u8], out: &mut impl FnMut(f64)) -> u64 {
        let frame = self.spec.frame_bytes();
        if frame == 0 {
            return 0;
        }
        let mut frames = 0;
        if !self.partial.is_empty() {
            let need = frame - self.partial.len();
            let take = need.min(bytes.len());
            self.partial.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.partial.len() < frame {
                return 0;
            }
            out(self.power(&self.partial));
            self.partial.clear();
            frames += 1;
        }
        let whole = bytes.len() / frame * frame;
        for f in bytes[..whole].chunks_exact(frame) {
            out(self.power(f));
            frames += 1;
        }
        self.partial.extend_from_slice(&bytes[whole..]);
        frames
    }

    fn power(&self, frame: &[u8]) -> f64 {
        let width = usize::from(self.spec.bits_per_sample / 8);
        let mut sum = 0.0;
        for s in frame.chunks_exact(width) {
            let x = sample(s, self.spec.float);
            sum += x * x;
        }
        sum / f64::from(self.spec.channels)
    }
}

/// One little-endian sample scaled to [-1, 1].
fn sample(s: &[u8], float: bool) -> f64 {
    match s.len() {
        1 => (f64::from(s[0]) - 128.0) / 128.0,
        2 => f64::from(i16::from_le_bytes([s[0], s[1]])) / 32_768.0,
        3 => {
            let v = i32::from_le_bytes([0, s[0], s[1], s[2]]) >> 8;
            f64::from(v) / 8_388_608.0
        }
        4 if float => {
            let v = f64::from(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
            if v.is_finite() {
                v.clamp(-1.0, 1.0)
            } else {
                0.0
            }
        }
        4 => f64::from(i32::from_le_bytes([s[0], s[1], s[2], s[3]])) / 2_147_483_648.0,
        _ => 0.0,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A canonical 44-byte WAV header.
    pub(crate) fn header(spec: PcmSpec, data_len: u32) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(b"RIFF");
        h.extend_from_slice(&36u32.wrapping_add(data_len).to_le_bytes());
        h.extend_from_slice(b"WAVEfmt ");
        h.extend_from_slice(&16u32.to_le_bytes());
        h.extend_from_slice(&(if spec.float { 3u16 } else { 1u16 }).to_le_bytes());
        h.extend_from_slice(&spec.channels.to_le_bytes());
        h.extend_from_slice(&spec.sample_rate_hz.to_le_bytes());
        let block = spec.frame_bytes() as u32;
        h.extend_from_slice(&(spec.sample_rate_hz * block).to_le_bytes());
        h.extend_from_slice(&(block as u16).to_le_bytes());
        h.extend_from_slice(&spec.bits_per_sample.to_le_bytes());
        h.extend_from_slice(b"data");
        h.extend_from_slice(&data_len.to_le_bytes());
        h
    }

    #[test]
    fn canonical_and_streaming_headers() {
        let spec = PcmSpec { sample_rate_hz: 16_000, channels: 2, bits_per_sample: 24, float: false };
        let h = header(spec, 9600);
        assert_eq!(parse_header(&h), WavParse::Header(WavHeader { spec, data_offset: 44, data_len: Some(9600) }));
        let streaming = header(spec, u32::MAX);
        assert!(matches!(parse_header(&streaming), WavParse::Header(WavHeader { data_len: None, .. })));
        for cut in 0..h.len() {
            assert_eq!(parse_header(&h[..cut]), WavParse::NeedMore, "cut at {cut}");
        }
    }

    #[test]
    fn extra_chunks_are_skipped_and_bad_files_named() {
        let spec = PcmSpec::OPENAI_PCM;
        let h = header(spec, 100);
        // Insert an odd-sized LIST chunk (padded) between fmt and data.
        let mut with_list = h[..36].to_vec();
        with_list.extend_from_slice(b"LIST\x03\0\0\0abc\0");
        with_list.extend_from_slice(&h[36..]);
        assert_eq!(
            parse_header(&with_list),
            WavParse::Header(WavHeader { spec, data_offset: 56, data_len: Some(100) })
        );
        assert!(matches!(parse_header(b"RIFX\0\0\0\0WAVE"), WavParse::Invalid(_)));
        let mut adpcm = h.clone();
        adpcm[20] = 2;
        assert!(matches!(parse_header(&adpcm), WavParse::Invalid(_)));
        // A chunk size that points past 64 KiB.
        let mut huge = h[..12].to_vec();
        huge.extend_from_slice(b"junk\xff\xff\xff\x7f");
        assert!(matches!(parse_header(&huge), WavParse::Invalid(_)));
    }

    #[test]
    fn samples_of_every_width() {
        let cases: [(PcmSpec, Vec<u8>, f64); 5] = [
            (PcmSpec { bits_per_sample: 8, ..PcmSpec::OPENAI_PCM }, vec![0], 1.0),
            (PcmSpec::OPENAI_PCM, i16::MIN.to_le_bytes().to_vec(), 1.0),
            (PcmSpec { bits_per_sample: 24, ..PcmSpec::OPENAI_PCM }, vec![0, 0, 0x40], 0.25),
            (PcmSpec { bits_per_sample: 32, ..PcmSpec::OPENAI_PCM }, (i32::MIN / 2).to_le_bytes().to_vec(), 0.25),
            (PcmSpec { bits_per_sample: 32, float: true, ..PcmSpec::OPENAI_PCM }, 0.5f32.to_le_bytes().to_vec(), 0.25),
        ];
        for (spec, bytes, power) in cases {
            let mut got = Vec::new();
            // Byte by byte: the partial frame carries over.
            let mut fp = FramePower::new(spec);
            for b in &bytes {
                fp.push(std::slice::from_ref(b), &mut |p| got.push(p));
            }
            assert_eq!(got, vec![power], "{spec:?}");
        }
        // Stereo: the mean over channels.
        let spec = PcmSpec { channels: 2, ..PcmSpec::OPENAI_PCM };
        let mut fp = FramePower::new(spec);
        let mut got = Vec::new();
        let frame = [i16::MIN.to_le_bytes(), 0i16.to_le_bytes()].concat();
        assert_eq!(fp.push(&frame, &mut |p| got.push(p)), 1);
        assert_eq!(got, vec![0.5]);
    }
}
