//! Speech for a fake microphone: espeak-ng's voice as a WAV file, with silence around it, and the
//! Python of the WebRTC peers (`scripts/setup.sh test` installs both).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The WebRTC peers' Python: `TOKENTAP_WEBRTC_PYTHON`, else the virtualenv `scripts/setup.sh` makes.
pub fn webrtc_python() -> PathBuf {
    let path = std::env::var_os("TOKENTAP_WEBRTC_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::browser::repo_root().join(".cache/venv-webrtc/bin/python"));
    assert!(path.exists(), "{} is missing: run scripts/setup.sh test", path.display());
    path
}

/// `dir/speech.wav`: espeak-ng saying `text`, with `before_ms` of silence before it and `after_ms`
/// after it, in espeak-ng's own format.
pub fn espeak_wav(dir: &Path, text: &str, before_ms: usize, after_ms: usize) -> PathBuf {
    let raw = dir.join("espeak.wav");
    let status = Command::new("espeak-ng")
        .args(["-w", raw.to_str().unwrap(), text])
        .status()
        .unwrap_or_else(|e| panic!("cannot run espeak-ng (scripts/setup.sh test installs it): {e}"));
    assert!(status.success(), "espeak-ng failed");
    let bytes = std::fs::read(&raw).unwrap();
    let (format, data) = wav_chunks(&bytes);
    let rate = u32::from_le_bytes(format[4..8].try_into().unwrap()) as usize;
    let block = u16::from_le_bytes(format[12..14].try_into().unwrap()) as usize;
    let silence = |ms: usize| vec![0u8; rate * ms / 1000 * block];
    let mut samples = silence(before_ms);
    samples.extend_from_slice(data);
    samples.extend(silence(after_ms));
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + samples.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&(format.len() as u32).to_le_bytes());
    out.extend_from_slice(format);
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(samples.len() as u32).to_le_bytes());
    out.extend_from_slice(&samples);
    let path = dir.join("speech.wav");
    std::fs::write(&path, out).unwrap();
    path
}

/// The `fmt ` and `data` chunks of a RIFF/WAVE file.
pub fn wav_chunks(bytes: &[u8]) -> (&[u8], &[u8]) {
    assert_eq!(&bytes[0..4], b"RIFF");
    assert_eq!(&bytes[8..12], b"WAVE");
    let (mut format, mut data) = (None, None);
    let mut at = 12;
    while at + 8 <= bytes.len() {
        let size = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let body = &bytes[at + 8..(at + 8 + size).min(bytes.len())];
        match &bytes[at..at + 4] {
            b"fmt " => format = Some(body),
            b"data" => data = Some(body),
            _ => {}
        }
        at += 8 + size + size % 2;
    }
    (format.expect("fmt chunk"), data.expect("data chunk"))
}
