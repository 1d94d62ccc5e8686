//! Speech audio on the wire: speech-to-text uploads and answers, text-to-speech audio. Which
//! format the audio is in, when it becomes audible (an energy-onset rule on decoded samples), how
//! much has arrived over time, and whether a player would have run dry. PCM and WAV are decoded
//! here, MP3 with symphonia (until the first audible sample); Opus, AAC and FLAC get byte counts
//! and the first byte only (the record says so).

mod format;
mod mp3;
mod multipart;
mod onset;
pub(crate) mod playout;
mod speech;
mod transcription;
mod wav;

pub use format::{AudioFormat, FormatSource, PcmSpec};
pub use onset::{SUSTAIN_MS, THRESHOLD_DBFS, WINDOW_MS};
pub use playout::{PredictedPlayout, MIN_UNDERRUN_NS};
pub use speech::{OnsetUnknown, SpeechAnalysis, SpeechAnalyzer, SpeechContext, SpeechFraming};
pub use transcription::{
    read_transcription_form, AudioUpload, TranscriptionAnalysis, TranscriptionAnalyzer, TranscriptionForm,
};

#[cfg(test)]
mod tests;
