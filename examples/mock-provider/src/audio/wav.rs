//! WAV (RIFF/WAVE) on both sides of the mock: the header of the speech stream it sends (sizes
//! unknown, so 0xFFFFFFFF, as streaming servers write them) and the duration of an uploaded file.

use std::time::Duration;

/// Sample layout of linear PCM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PcmLayout {
    pub(crate) sample_rate_hz: u32,
    pub(crate) channels: u16,
    pub(crate) bits_per_sample: u16,
}

impl PcmLayout {
    /// What OpenAI's speech endpoint sends for `pcm` and `wav`: 24 kHz, 16-bit signed LE, mono.
    pub(crate) const SPEECH: PcmLayout = PcmLayout { sample_rate_hz: 24_000, channels: 1, bits_per_sample: 16 };

    /// Bytes of one frame (one sample per channel).
    pub(crate) fn frame_bytes(&self) -> u64 {
        u64::from(self.channels) * u64::from(self.bits_per_sample).div_ceil(8)
    }

    pub(crate) fn byte_rate(&self) -> u64 {
        u64::from(self.sample_rate_hz) * self.frame_bytes()
    }
}

/// Size of [`streaming_header`].
pub(crate) const HEADER_BYTES: usize = 44;

/// A canonical 44-byte PCM WAV header whose RIFF and data sizes are 0xFFFFFFFF: the length is not
/// known when the header goes out.
pub(crate) fn streaming_header(layout: PcmLayout) -> [u8; HEADER_BYTES] {
    let frame_bytes = u16::try_from(layout.frame_bytes()).unwrap_or(u16::MAX);
    let byte_rate = u32::try_from(layout.byte_rate()).unwrap_or(u32::MAX);
    let mut header = [0u8; HEADER_BYTES];
    let fields: [&[u8]; 13] = [
        b"RIFF",
        &u32::MAX.to_le_bytes(),
        b"WAVE",
        b"fmt ",
        &16u32.to_le_bytes(),
        &1u16.to_le_bytes(), // linear PCM
        &layout.channels.to_le_bytes(),
        &layout.sample_rate_hz.to_le_bytes(),
        &byte_rate.to_le_bytes(),
        &frame_bytes.to_le_bytes(),
        &layout.bits_per_sample.to_le_bytes(),
        b"data",
        &u32::MAX.to_le_bytes(),
    ];
    let mut at = 0;
    for field in fields {
        header[at..at + field.len()].copy_from_slice(field);
        at += field.len();
    }
    header
}

/// What the header of an uploaded WAV file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WavFile {
    pub(crate) layout: PcmLayout,
    /// The header's average bytes per second (0 when the file leaves it out).
    pub(crate) declared_byte_rate: u32,
    /// Bytes of sample data: the data chunk's declared size, or, when that is unknown (0 or
    /// 0xFFFFFFFF, as streaming writers leave it), what the file holds after the data chunk's
    /// header; never more than the file holds.
    pub(crate) data_bytes: u64,
}

impl WavFile {
    /// Reads the RIFF chunks up to the data chunk; `None` when the bytes are not a WAV file with a
    /// `fmt ` chunk before its `data` chunk.
    pub(crate) fn read(file: &[u8]) -> Option<WavFile> {
        if file.len() < 12 || &file[..4] != b"RIFF" || &file[8..12] != b"WAVE" {
            return None;
        }
        let mut layout = None;
        let mut declared_byte_rate = 0;
        let mut at = 12usize;
        while let Some(chunk_header) = file.get(at..at.checked_add(8)?) {
            let id = &chunk_header[..4];
            let size = u32::from_le_bytes([chunk_header[4], chunk_header[5], chunk_header[6], chunk_header[7]]);
            let payload = at + 8;
            if id == b"data" {
                let available = (file.len() - payload) as u64;
                let data_bytes = match size {
                    0 | u32::MAX => available,
                    declared => u64::from(declared).min(available),
                };
                return Some(WavFile { layout: layout?, declared_byte_rate, data_bytes });
            }
            if id == b"fmt " {
                let fmt = file.get(payload..payload.checked_add(16)?)?;
                let u16_at = |i: usize| u16::from_le_bytes([fmt[i], fmt[i + 1]]);
                let u32_at = |i: usize| u32::from_le_bytes([fmt[i], fmt[i + 1], fmt[i + 2], fmt[i + 3]]);
                layout =
                    Some(PcmLayout { sample_rate_hz: u32_at(4), channels: u16_at(2), bits_per_sample: u16_at(14) });
                declared_byte_rate = u32_at(8);
            }
            // Chunks are padded to an even size.
            let padded = usize::try_from(u64::from(size) + u64::from(size % 2)).ok()?;
            at = payload.checked_add(padded)?;
        }
        None
    }

    /// Play time of the sample data; `None` when the header gives no usable byte rate.
    pub(crate) fn duration(&self) -> Option<Duration> {
        let byte_rate = match self.declared_byte_rate {
            0 => self.layout.byte_rate(),
            declared => u64::from(declared),
        };
        if byte_rate == 0 {
            return None;
        }
        let micros = u128::from(self.data_bytes) * 1_000_000 / u128::from(byte_rate);
        Some(Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A PCM WAV file with `data_bytes` of zeros, declaring `declared` as its data size.
    pub(crate) fn wav_file(layout: PcmLayout, declared: u32, data_bytes: usize) -> Vec<u8> {
        let mut file = streaming_header(layout).to_vec();
        file[40..44].copy_from_slice(&declared.to_le_bytes());
        file.resize(HEADER_BYTES + data_bytes, 0);
        file
    }

    const CD_MONO: PcmLayout = PcmLayout { sample_rate_hz: 16_000, channels: 1, bits_per_sample: 16 };

    #[test]
    fn streaming_header_is_canonical() {
        let header = streaming_header(PcmLayout::SPEECH);
        assert_eq!(&header[..4], b"RIFF");
        assert_eq!(&header[4..8], &[0xFF; 4]);
        assert_eq!(&header[8..16], b"WAVEfmt ");
        assert_eq!(u32::from_le_bytes(header[24..28].try_into().unwrap()), 24_000);
        assert_eq!(u32::from_le_bytes(header[28..32].try_into().unwrap()), 48_000);
        assert_eq!(u16::from_le_bytes(header[32..34].try_into().unwrap()), 2);
        assert_eq!(&header[36..40], b"data");
        assert_eq!(&header[40..44], &[0xFF; 4]);
        let read = WavFile::read(&header).unwrap();
        assert_eq!((read.layout, read.data_bytes), (PcmLayout::SPEECH, 0));
    }

    #[test]
    fn duration_from_the_declared_size_or_the_file_size() {
        // 1 s at 16 kHz, 16-bit mono = 32000 bytes, declared.
        let declared = WavFile::read(&wav_file(CD_MONO, 32_000, 32_000)).unwrap();
        assert_eq!(declared.duration(), Some(Duration::from_secs(1)));
        // Unknown sizes: what the file holds.
        for unknown in [0, u32::MAX] {
            let file = WavFile::read(&wav_file(CD_MONO, unknown, 16_000)).unwrap();
            assert_eq!(file.duration(), Some(Duration::from_millis(500)), "{unknown:#x}");
        }
        // A declared size beyond the end of a cut file: what arrived.
        let cut = WavFile::read(&wav_file(CD_MONO, 32_000, 8_000)).unwrap();
        assert_eq!(cut.duration(), Some(Duration::from_millis(250)));
        // Stereo 48 kHz 24-bit: 288000 bytes per second.
        let wide = PcmLayout { sample_rate_hz: 48_000, channels: 2, bits_per_sample: 24 };
        let file = WavFile::read(&wav_file(wide, 144_000, 144_000)).unwrap();
        assert_eq!(file.duration(), Some(Duration::from_millis(500)));
    }

    #[test]
    fn skips_other_chunks_and_refuses_what_is_not_wav() {
        let mut file = b"RIFF\0\0\0\0WAVE".to_vec();
        file.extend_from_slice(b"LIST\x03\0\0\0abc\0"); // odd size, padded
        file.extend_from_slice(&streaming_header(CD_MONO)[12..36]);
        file.extend_from_slice(b"data\x10\0\0\0");
        file.extend_from_slice(&[0; 16]);
        assert_eq!(WavFile::read(&file).unwrap().duration(), Some(Duration::from_micros(500)));

        assert_eq!(WavFile::read(b"ID3\x04 not a wav file at all"), None);
        assert_eq!(WavFile::read(b"RIFF\0\0\0\0WAVE"), None, "no chunks");
        assert_eq!(WavFile::read(b"RIFF\0\0\0\0WAVEdata\0\0\0\0"), None, "data before fmt");
        assert_eq!(WavFile::read(b"RIFF\0\0\0\0WAVELIST\xff\xff\xff\xff"), None, "a chunk past the end");
        let mut short_fmt = b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0".to_vec();
        short_fmt.extend_from_slice(&[1, 0, 1]);
        assert_eq!(WavFile::read(&short_fmt), None, "fmt cut short");
        let silent = PcmLayout { sample_rate_hz: 0, channels: 1, bits_per_sample: 16 };
        assert_eq!(WavFile::read(&wav_file(silent, 10, 10)).unwrap().duration(), None, "no byte rate");
    }
}
