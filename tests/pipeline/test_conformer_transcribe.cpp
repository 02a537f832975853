// Conformer speech to text end to end (audio file -> log-mel -> encoder -> head -> text) against the
// upstream packages on the same files: the tiny random-weight .nemo archives written by NeMo 3.0.0
// and GigaAM checkpoints written as gigaam 0.1.0 does, transcribed by those packages
// (scripts/make_conformer_e2e_fixtures.py -> tests/fixtures/conformer/e2e/reference.json). Also the
// long-audio chunking's frame bookkeeping, the options conformers refuse, and SpeechModel's routing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/audio.h"
#include "pipeline/conformer_transcribe.h"
#include "pipeline/speech_model.h"

using namespace xdna;

namespace {

const std::string kArchives = std::string(XDNA_FIXTURE_DIR) + "/conformer/archives/";
const std::string kClip = std::string(XDNA_FIXTURE_DIR) + "/audio/speech16k.wav";

nlohmann::json reference() {
  std::ifstream f(std::string(XDNA_FIXTURE_DIR) + "/conformer/e2e/reference.json");
  return nlohmann::json::parse(f);
}

std::vector<int32_t> all_tokens(const Transcript& t) {
  std::vector<int32_t> ids;
  for (const TranscriptSegment& s : t.segments) ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
  return ids;
}

// Levenshtein distance over UTF-8 code points.
size_t edit_distance(const std::string& a, const std::string& b) {
  auto points = [](const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
      size_t n = (static_cast<unsigned char>(s[i]) & 0x80) == 0 ? 1 : (static_cast<unsigned char>(s[i]) & 0xE0) == 0xC0 ? 2 : 3;
      out.push_back(s.substr(i, n));
      i += n;
    }
    return out;
  };
  const auto x = points(a), y = points(b);
  std::vector<size_t> row(y.size() + 1);
  for (size_t j = 0; j <= y.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= x.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= y.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (x[i - 1] == y[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[y.size()];
}

TEST(ConformerTranscribe, NemoArchivesMatchNemo) {
  const nlohmann::json ref = reference()["nemo 3.0.0"];
  const std::vector<float> samples = load_audio(kClip, 16000);
  for (const char* name : {"parakeet_ctc_bpe.nemo", "parakeet_tdt_bpe.nemo", "conformer_ctc_char.nemo"}) {
    const nlohmann::json& want = ref[std::string(name) + ":speech16k.wav"];
    const ConformerTranscriber asr = ConformerTranscriber::load(kArchives + name);
    const Transcript t = asr.transcribe(samples, {});
    std::vector<int32_t> tokens = want["tokens"];
    if (asr.model().config().head == "ctc") {  // NeMo's CTC y_sequence is per frame: collapse it
      std::vector<int32_t> collapsed;
      const int32_t blank = static_cast<int32_t>(asr.model().config().vocab_size);
      for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] != blank && (i == 0 || tokens[i] != tokens[i - 1])) collapsed.push_back(tokens[i]);
      tokens = collapsed;
    }
    EXPECT_EQ(all_tokens(t), tokens) << name;
    EXPECT_EQ(t.text, want["text"].get<std::string>()) << name;
    EXPECT_NEAR(t.duration, 2.9136, 1e-3);
    ASSERT_FALSE(t.segments.empty()) << name;
    EXPECT_GE(t.segments.front().start, 0.0);
    EXPECT_LE(t.segments.back().end, t.duration + 1e-9);
  }
}

TEST(ConformerTranscribe, GigaamCheckpointsMatchGigaam) {
  const nlohmann::json ref = reference()["gigaam 0.1.0"];
  const std::vector<float> samples = load_audio(kClip, 16000);
  const Transcript rnnt = ConformerTranscriber::load(kArchives + "gigaam_rnnt.ckpt").transcribe(samples, {});
  EXPECT_EQ(rnnt.text, ref["gigaam_rnnt.ckpt:speech16k.wav"]["text"].get<std::string>());
  // CTC: gigaam's own log-probs have a top-2 margin of 0.0096 at frame 61 of 73 (random weights),
  // inside the f32 FFT differences of the two log-mel implementations (docs: 3e-4 on log-mel), so
  // one character may flip there; everything else must agree.
  const Transcript ctc = ConformerTranscriber::load(kArchives + "gigaam_ctc.ckpt").transcribe(samples, {});
  const std::string want = ref["gigaam_ctc.ckpt:speech16k.wav"]["text"];
  EXPECT_LE(edit_distance(ctc.text, want), 1u) << ctc.text << " vs " << want;
  EXPECT_GE(ctc.text.size(), 40u);
}

// Every parameter random (batch-norm statistics too), a 31-tap conv module as GigaAM v2 has, loaded
// through load_conformer: the encoder output equals gigaam's on fixed features. (This is what
// caught the loader taking 10000 as GigaAM's rotary base instead of pos_emb_max_len.)
TEST(ConformerTranscribe, GigaamLoadedEncoderMatchesGigaam) {
  const nlohmann::json ref = reference()["gigaam 0.1.0 random encoder"];
  const auto model = load_conformer(std::string(XDNA_FIXTURE_DIR) + "/conformer/e2e/gigaam_ctc_random.ckpt");
  EXPECT_EQ(model->config().rotary_base, static_cast<float>(model->config().pos_emb_max_len));
  const int64_t frames = ref["frames"];
  const Tensor encoded = model->encode(Tensor::from_vector({64, frames}, ref["features"].get<std::vector<float>>()));
  const std::vector<float> want = ref["encoded"];
  const std::vector<float> got = encoded.to_vector();
  ASSERT_EQ(encoded.dim(0), ref["encoded_frames"].get<int64_t>());
  ASSERT_EQ(got.size(), want.size());
  float peak = 0, err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    peak = std::max(peak, std::abs(want[i]));
    err = std::max(err, std::abs(got[i] - want[i]));
  }
  EXPECT_LE(err, 1e-4f * peak) << "max error " << err << " of max |ref| " << peak;
}

// With context covering the whole file, every chunk encodes the whole file, so the kept frames
// joined must be exactly the one-pass frames: the same tokens at the same frames.
TEST(ConformerTranscribe, ChunkBookkeepingKeepsEveryFrameOnce) {
  const std::vector<float> samples = load_audio(kClip, 16000);
  const auto model = load_conformer(kArchives + "parakeet_tdt_bpe.nemo");
  const Transcript whole = ConformerTranscriber(model).transcribe(samples, {});
  ConformerChunking chunked;
  chunked.chunk_seconds = 0.4;  // 5 encoder frames of 80 ms: 8 chunks over 2.9 s
  chunked.context_seconds = 10;
  const Transcript parts = ConformerTranscriber(model, chunked).transcribe(samples, {});
  EXPECT_EQ(parts.windows, 8);
  EXPECT_EQ(all_tokens(parts), all_tokens(whole));
  EXPECT_EQ(parts.text, whole.text);
  ASSERT_EQ(parts.segments.size(), whole.segments.size());
  for (size_t i = 0; i < whole.segments.size(); ++i) {
    EXPECT_DOUBLE_EQ(parts.segments[i].start, whole.segments[i].start);
    EXPECT_DOUBLE_EQ(parts.segments[i].end, whole.segments[i].end);
  }
}

// Real chunking (small context): still one token stream, times within the file, no crash at the
// chunk borders, and a silent tail adds no frames beyond the audio.
TEST(ConformerTranscribe, LongAudioInChunks) {
  std::vector<float> samples = load_audio(kClip, 16000);
  const std::vector<float> once = samples;
  for (int i = 0; i < 3; ++i) samples.insert(samples.end(), once.begin(), once.end());
  ConformerChunking chunked;
  chunked.chunk_seconds = 3.0;
  chunked.context_seconds = 1.0;
  const auto model = load_conformer(kArchives + "parakeet_ctc_bpe.nemo");
  const Transcript t = ConformerTranscriber(model, chunked).transcribe(samples, {});
  EXPECT_EQ(t.windows, 4);
  EXPECT_NEAR(t.duration, 4 * 2.9136, 1e-3);
  double last = 0;
  for (const TranscriptSegment& s : t.segments) {
    EXPECT_GE(s.start, last - 1e-9);
    EXPECT_LE(s.end, t.duration + 1e-9);
    last = s.start;
  }
}

TEST(ConformerTranscribe, WhisperOnlyOptionsAreRefused) {
  const ConformerTranscriber asr = ConformerTranscriber::load(kArchives + "parakeet_ctc_bpe.nemo");
  const std::vector<float> samples(16000, 0.0f);
  TranscribeOptions o;
  o.language = "de";
  EXPECT_THROW(asr.transcribe(samples, o), std::invalid_argument);
  o = {};
  o.task = "translate";
  EXPECT_THROW(asr.transcribe(samples, o), std::invalid_argument);
  o = {};
  o.initial_prompt = "hello";
  EXPECT_THROW(asr.transcribe(samples, o), std::invalid_argument);
  o = {};
  o.word_timestamps = true;
  EXPECT_THROW(asr.transcribe(samples, o), std::invalid_argument);
  EXPECT_THROW(asr.transcribe({}, {}), std::invalid_argument);
  EXPECT_NO_THROW(asr.transcribe(samples, {}));  // silence: any text, no error
}

TEST(SpeechModel, RoutesByWhatThePathHolds) {
  EXPECT_TRUE(looks_like_conformer(kArchives + "parakeet_ctc_bpe.nemo"));
  EXPECT_TRUE(looks_like_conformer(kArchives + "gigaam_ctc.ckpt"));
  EXPECT_TRUE(looks_like_conformer(std::string(XDNA_FIXTURE_DIR) + "/conformer/encoder/parakeet_ctc_tiny_hf"));
  EXPECT_FALSE(looks_like_conformer(kClip));
  EXPECT_FALSE(looks_like_conformer(std::string(XDNA_FIXTURE_DIR) + "/no-such-dir"));
  const SpeechModel m = SpeechModel::load(kArchives + "parakeet_tdt_bpe.nemo");
  EXPECT_EQ(m.family(), "parakeet");
  EXPECT_EQ(m.whisper(), nullptr);
  ASSERT_NE(m.conformer(), nullptr);
  EXPECT_EQ(m.sample_rate(), 16000);
  EXPECT_TRUE(is_speech_family("gigaam"));
  EXPECT_FALSE(is_speech_family("bert"));
}

}  // namespace
