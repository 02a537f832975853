// Whisper's decoding rules against a scripted fake model over a tiny vocabulary: ids 0..9 are
// words "w0".."w9", then eot, sot, <|en|>, translate, transcribe, sot_lm, sot_prev, no_speech,
// no_timestamps, and 1501 timestamps (0.00 .. 30.00 s).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pipeline/whisper_decoding.h"

namespace xdna::whisper {
namespace {

WhisperTokens tiny_tokens() {
  WhisperTokens t;
  t.eot = 10, t.sot = 11, t.translate = 13, t.transcribe = 14, t.sot_lm = 15, t.sot_prev = 16;
  t.no_speech = 17, t.no_timestamps = 18, t.timestamp_begin = 19;
  t.languages = {12};
  t.language_codes = {"en"};
  return t;
}
const WhisperTokens T = tiny_tokens();
constexpr int64_t kVocab = 19 + 1501;
int32_t ts(int i) { return T.timestamp_begin + i; }  // <|i * 0.02|>

WindowOptions tiny_options() {
  WindowOptions o;
  o.suppress_tokens = {9, T.transcribe, T.translate, T.sot, T.sot_prev, T.sot_lm, T.no_speech};
  o.blank_tokens = {0, T.eot};  // word 0 plays " "
  return o;
}

// Logits for the next token of one beam: `window` is the index of the encoded window,
// `history` every token the beam has been fed, `sampled` those after the sot sequence.
using Script = std::function<std::vector<float>(int window, const std::vector<int32_t>& history,
                                                const std::vector<int32_t>& sampled)>;

// A model that keeps each beam's fed tokens (as its KV cache would) and answers from a script.
struct FakeModel {
  Script script;
  int window = -1;
  std::vector<std::vector<int32_t>> beams;
  std::vector<std::pair<int64_t, int64_t>> encoded;       // (seek, frames)
  std::vector<std::vector<int32_t>> first_feeds;          // what each start() was fed first
  std::vector<std::vector<std::vector<int32_t>>> steps;   // every step's tokens
  int starts = 0;
  size_t max_beams = 0;
  WindowModel bind() {
    WindowModel m;
    m.encode = [this](int64_t seek, int64_t frames) {
      encoded.emplace_back(seek, frames);
      ++window;
    };
    m.start = [this] {
      beams.assign(1, {});
      ++starts;
      first_feeds.emplace_back();
    };
    m.step = [this](const std::vector<std::vector<int32_t>>& tokens) {
      EXPECT_EQ(tokens.size(), beams.size());
      steps.push_back(tokens);
      if (first_feeds.back().empty()) first_feeds.back() = tokens[0];
      max_beams = std::max(max_beams, tokens.size());
      std::vector<float> out;
      for (size_t b = 0; b < tokens.size(); ++b) {
        beams[b].insert(beams[b].end(), tokens[b].begin(), tokens[b].end());
        auto it = std::find(beams[b].rbegin(), beams[b].rend(), T.sot).base();
        while (it != beams[b].end() && (*it == 12 || *it == T.transcribe || *it == T.translate ||
                                        *it == T.no_timestamps))
          ++it;  // the rest of the sot sequence
        std::vector<int32_t> sampled(it, beams[b].end());
        std::vector<float> row = script(window, beams[b], sampled);
        EXPECT_EQ(static_cast<int64_t>(row.size()), kVocab);
        out.insert(out.end(), row.begin(), row.end());
      }
      return Tensor::from_vector({static_cast<int64_t>(tokens.size()), kVocab}, out);
    };
    m.reorder = [this](const std::vector<int64_t>& source) {
      std::vector<std::vector<int32_t>> next;
      for (int64_t s : source) next.push_back(beams.at(s));
      beams = next;
    };
    m.text = [](const std::vector<int32_t>& ids) {
      std::string s;
      for (int32_t id : ids) s += " w" + std::to_string(id);
      return s;
    };
    return m;
  }
};

std::vector<float> flat(float value = 0.0f) { return std::vector<float>(kVocab, value); }

// Logits that make `tokens` (after the sot) the overwhelming choice, then eot.
Script say(std::vector<int32_t> tokens) {
  return [tokens](int, const std::vector<int32_t>&, const std::vector<int32_t>& sampled) {
    std::vector<float> x = flat();
    x[sampled.size() < tokens.size() ? tokens[sampled.size()] : T.eot] = 30.0f;
    return x;
  };
}

bool masked(const std::vector<float>& x, int32_t id) { return std::isinf(x[id]) && x[id] < 0; }

TEST(WhisperDecoding, InitialTokensKeepTheLast223PromptTokens) {
  std::vector<int32_t> prompt(300);
  for (int i = 0; i < 300; ++i) prompt[i] = i % 9;
  auto init = initial_tokens({T.sot, 12, T.transcribe}, prompt, T, true);
  ASSERT_EQ(init.size(), 1u + 223u + 3u);
  EXPECT_EQ(init[0], T.sot_prev);
  EXPECT_EQ(init[1], prompt[300 - 223]);
  EXPECT_EQ(init[223], prompt[299]);
  EXPECT_EQ(init[224], T.sot);
  EXPECT_EQ(initial_tokens({T.sot}, {}, T, false), (std::vector<int32_t>{T.sot, T.no_timestamps}));
}

TEST(WhisperDecoding, FirstTokenIsAnEarlyTimestamp) {
  WindowOptions o = tiny_options();
  std::vector<float> x = flat();
  apply_logit_filters(x.data(), kVocab, {}, T, o);
  for (int32_t id = 0; id < T.timestamp_begin; ++id) EXPECT_TRUE(masked(x, id)) << id;
  for (int i = 0; i <= 50; ++i) EXPECT_FALSE(masked(x, ts(i))) << i;  // up to 1.00 s
  EXPECT_TRUE(masked(x, ts(51)));
  EXPECT_TRUE(masked(x, ts(1500)));
}

TEST(WhisperDecoding, BlankAndSuppressedTokens) {
  WindowOptions o = tiny_options();
  o.timestamps = false;
  std::vector<float> first = flat(), later = flat();
  apply_logit_filters(first.data(), kVocab, {}, T, o);
  apply_logit_filters(later.data(), kVocab, {3}, T, o);
  EXPECT_TRUE(masked(first, 0));
  EXPECT_TRUE(masked(first, T.eot));
  EXPECT_FALSE(masked(later, 0));       // blank only at the first position
  EXPECT_FALSE(masked(later, T.eot));
  for (auto* x : {&first, &later}) {
    EXPECT_TRUE(masked(*x, 9));
    EXPECT_TRUE(masked(*x, T.sot));
    EXPECT_TRUE(masked(*x, T.no_speech));
    EXPECT_FALSE(masked(*x, 5));
    EXPECT_FALSE(masked(*x, ts(3)));  // no timestamp rules without timestamps
  }
}

TEST(WhisperDecoding, TimestampsComeInPairsAndNeverGoBack) {
  WindowOptions o = tiny_options();
  auto filtered = [&](const std::vector<int32_t>& sampled) {
    std::vector<float> x = flat();
    x[3] = 10.0f;  // a text token (and eot) likelier than all timestamps together
    x[T.eot] = 10.0f;
    apply_logit_filters(x.data(), kVocab, sampled, T, o);
    return x;
  };
  auto x = filtered({ts(5)});  // opened a segment: text must follow
  EXPECT_TRUE(masked(x, ts(5)) && masked(x, ts(9)) && masked(x, T.no_timestamps));
  EXPECT_FALSE(masked(x, 3));
  EXPECT_FALSE(masked(x, T.eot));

  x = filtered({ts(5), 3});  // text: a later timestamp may close it, not the same one
  EXPECT_TRUE(masked(x, ts(4)) && masked(x, ts(5)));
  EXPECT_FALSE(masked(x, ts(6)));
  EXPECT_FALSE(masked(x, 3));

  x = filtered({ts(5), 3, ts(8)});  // closed: the next segment opens at >= 8, or eot
  for (int32_t id = 0; id < T.eot; ++id) EXPECT_TRUE(masked(x, id)) << id;
  EXPECT_FALSE(masked(x, T.eot));
  EXPECT_TRUE(masked(x, ts(7)));
  EXPECT_FALSE(masked(x, ts(8)));

  x = filtered({ts(5), 3, ts(8), ts(8)});  // a pair: text next
  EXPECT_TRUE(masked(x, ts(8)) && masked(x, ts(1000)));
  EXPECT_FALSE(masked(x, 3));
}

TEST(WhisperDecoding, TimestampMassForcesATimestamp) {
  WindowOptions o = tiny_options();
  std::vector<float> x = flat();
  x[3] = 5.0f;  // log(1500 timestamps) ~ 7.3 > 5: the timestamps together win
  apply_logit_filters(x.data(), kVocab, {ts(0), 3}, T, o);
  for (int32_t id = 0; id < T.timestamp_begin; ++id) EXPECT_TRUE(masked(x, id)) << id;
  EXPECT_FALSE(masked(x, ts(100)));

  x = flat();
  x[3] = 9.0f;  // now the text token is likelier
  apply_logit_filters(x.data(), kVocab, {ts(0), 3}, T, o);
  EXPECT_FALSE(masked(x, 3));
}

TEST(WhisperDecoding, GreedyFollowsTheScriptAndReportsNoSpeech) {
  FakeModel fake;
  const std::vector<int32_t> want = {ts(0), 3, 4, ts(50)};
  fake.script = [&](int w, const std::vector<int32_t>& h, const std::vector<int32_t>& s) {
    std::vector<float> x = say(want)(w, h, s);
    if (h.back() == T.sot) x[T.no_speech] = 40.0f;  // at the sot: "no speech" would be certain
    return x;
  };
  WindowModel m = fake.bind();
  WindowOptions o = tiny_options();
  o.beam_size = 1;
  auto init = initial_tokens({T.sot, 12, T.transcribe}, {5, 6}, T, true);
  WindowResult r = decode_window(init, T, o, m);
  EXPECT_EQ(r.tokens, want);
  EXPECT_GT(r.no_speech_prob, 0.99f);  // raw logits at the sot, before any filter
  // The prompt through sot, then the rest of the sot sequence, then one token per step.
  ASSERT_GE(fake.steps.size(), 3u);
  EXPECT_EQ(fake.steps[0][0], (std::vector<int32_t>{T.sot_prev, 5, 6, T.sot}));
  EXPECT_EQ(fake.steps[1][0], (std::vector<int32_t>{12, T.transcribe}));
  EXPECT_EQ(fake.steps.size(), 2u + want.size());  // eot is chosen, never fed
  EXPECT_NEAR(r.avg_logprob, r.sum_logprob / 5.0f, 1e-6);
  EXPECT_LE(r.sum_logprob, 0.0f);
  EXPECT_GT(r.sum_logprob, -1e-3f);
}

// Greedy takes w1 (likelier first step) and ends badly; the beam finds w2 then a sure ending.
Script garden_path() {
  return [](int, const std::vector<int32_t>&, const std::vector<int32_t>& s) {
    std::vector<float> x = flat();
    if (s.empty()) {
      x[ts(0)] = 5.0f;
    } else if (s == std::vector<int32_t>{ts(0)}) {
      x[1] = 2.0f;
      x[2] = 1.5f;
    } else if (s == std::vector<int32_t>{ts(0), 1}) {
      x[ts(50)] = 1.0f;  // ~1500 timestamps around it: a poor choice whatever is taken
    } else if (s == std::vector<int32_t>{ts(0), 2}) {
      x[ts(100)] = 30.0f;
    } else {
      x[T.eot] = 30.0f;
    }
    return x;
  };
}

TEST(WhisperDecoding, BeamSearchBeatsGreedyOnAGardenPath) {
  WindowOptions o = tiny_options();
  FakeModel greedy_model;
  greedy_model.script = garden_path();
  WindowModel g = greedy_model.bind();
  o.beam_size = 1;
  WindowResult greedy = decode_window({T.sot}, T, o, g);
  EXPECT_EQ(greedy.tokens, (std::vector<int32_t>{ts(0), 1, ts(50)}));

  for (int beams : {2, 5}) {
    FakeModel beam_model;
    beam_model.script = garden_path();
    WindowModel b = beam_model.bind();
    o.beam_size = beams;
    WindowResult beam = decode_window({T.sot}, T, o, b);
    EXPECT_EQ(beam.tokens, (std::vector<int32_t>{ts(0), 2, ts(100)})) << beams;
    EXPECT_GT(beam.sum_logprob, greedy.sum_logprob);
    EXPECT_EQ(beam_model.max_beams, static_cast<size_t>(beams));
    // The first fed token of each beam after the prompt names the beam's path.
    EXPECT_EQ(beam_model.steps[1].size(), static_cast<size_t>(beams));
  }
}

TEST(WhisperDecoding, LengthPenaltyChoosesBetweenFinishedBeams) {
  // Two endings: short [ts0 w1 ts5] (sum ~ -0.55) or long [ts0 w2 w3 w4 w5 ts9] (~ -0.85); with
  // the default sum / length ranking the long one wins (-0.14 vs -0.18); with plain sums
  // (length_penalty ~ 0: ((5 + len) / 6)^0 = 1) the short one does.
  auto script = [](int, const std::vector<int32_t>&, const std::vector<int32_t>& s) {
    std::vector<float> x = flat(-INFINITY);  // no filler beams: exactly two paths exist
    const std::vector<int32_t> long_path = {ts(0), 2, 3, 4, 5, ts(9)};
    if (s.empty()) x[ts(0)] = 0.0f;
    else if (s.size() == 1) x[1] = 0.0f, x[2] = -0.3f;
    else if (s[1] == 1) x[s.size() == 2 ? ts(5) : T.eot] = 0.0f;
    else x[s.size() < long_path.size() ? long_path[s.size()] : T.eot] = 0.0f;
    return x;
  };
  WindowOptions o = tiny_options();
  o.beam_size = 2;
  FakeModel a;
  a.script = script;
  WindowModel ma = a.bind();
  EXPECT_EQ(decode_window({T.sot}, T, o, ma).tokens, (std::vector<int32_t>{ts(0), 2, 3, 4, 5, ts(9)}));
  o.length_penalty = 1e-9f;  // ((5 + len) / 6)^~0 = 1: plain sums
  FakeModel b;
  b.script = script;
  WindowModel mb = b.bind();
  EXPECT_EQ(decode_window({T.sot}, T, o, mb).tokens, (std::vector<int32_t>{ts(0), 1, ts(5)}));
}

TEST(WhisperDecoding, FallbackRules) {
  TranscribeOptions opt;
  WindowResult r;
  r.avg_logprob = -0.5f, r.compression_ratio = 1.5f, r.no_speech_prob = 0.1f;
  EXPECT_FALSE(needs_fallback(r, opt));
  r.compression_ratio = 2.5f;
  EXPECT_TRUE(needs_fallback(r, opt));  // repetitive
  r.compression_ratio = 1.5f, r.avg_logprob = -1.2f;
  EXPECT_TRUE(needs_fallback(r, opt));  // unlikely
  EXPECT_FALSE(is_silence(r, opt));
  r.no_speech_prob = 0.7f;
  EXPECT_FALSE(needs_fallback(r, opt));  // silence: no retry ...
  EXPECT_TRUE(is_silence(r, opt));       // ... and the window is skipped
  r.avg_logprob = -0.5f;
  EXPECT_FALSE(is_silence(r, opt));  // confident text despite no_speech
  EXPECT_EQ(compression_ratio(""), 0.0f);
  // Python: len(s) / len(zlib.compress(s))
  EXPECT_NEAR(compression_ratio("hello world"), 11.0f / 19.0f, 1e-6);
  std::string rep;
  for (int i = 0; i < 20; ++i) rep += "the same words again ";
  EXPECT_NEAR(compression_ratio(rep), 420.0f / 34.0f, 1e-5);
}

TEST(WhisperDecoding, FallbackWalksTheTemperatureLadder) {
  // Every step is a near-uniform guess (avg_logprob ~ -7): every temperature is tried.
  FakeModel fake;
  fake.script = [](int, const std::vector<int32_t>&, const std::vector<int32_t>& s) {
    std::vector<float> x = flat();
    if (s.size() >= 3) x[T.eot] = 30.0f;
    return x;
  };
  WindowModel m = fake.bind();
  TranscribeOptions opt;
  WindowOptions o = tiny_options();
  WindowResult r = decode_with_fallback({T.sot}, T, opt, o, m);
  EXPECT_EQ(fake.starts, 6);
  EXPECT_FLOAT_EQ(r.temperature, 1.0f);
  EXPECT_LT(r.avg_logprob, -1.0f);
  EXPECT_EQ(fake.max_beams, 5u);  // best_of samples at temperature > 0

  // Silence (no_speech at the sot certain) stops at the first temperature.
  FakeModel quiet;
  quiet.script = [&](int w, const std::vector<int32_t>& h, const std::vector<int32_t>& s) {
    std::vector<float> x = fake.script(w, h, s);
    if (h.back() == T.sot) x[T.no_speech] = 40.0f;
    return x;
  };
  WindowModel mq = quiet.bind();
  r = decode_with_fallback({T.sot}, T, opt, o, mq);
  EXPECT_EQ(quiet.starts, 1);
  EXPECT_TRUE(is_silence(r, opt));
}

TEST(WhisperDecoding, SplitSegments) {
  // Pairs, then a single closing timestamp: two segments, seek over the whole window.
  auto s = split_segments({ts(0), 3, ts(5), ts(6), 4, ts(9)}, T, 3000);
  ASSERT_EQ(s.spans.size(), 2u);
  EXPECT_EQ(s.spans[0].begin, 0);
  EXPECT_EQ(s.spans[0].end, 3);
  EXPECT_EQ(s.spans[0].start_ts, 0);
  EXPECT_EQ(s.spans[0].end_ts, 5);
  EXPECT_EQ(s.spans[1].begin, 3);
  EXPECT_EQ(s.spans[1].end, 6);
  EXPECT_EQ(s.spans[1].start_ts, 6);
  EXPECT_EQ(s.spans[1].end_ts, 9);
  EXPECT_EQ(s.seek_frames, 3000);

  // Ends in a pair then unfinished text: the text is dropped, seek to the last pair (9 * 2).
  s = split_segments({ts(0), 3, ts(5), ts(6), 4, ts(9), ts(9), 5}, T, 3000);
  ASSERT_EQ(s.spans.size(), 2u);
  EXPECT_EQ(s.spans[1].end, 6);
  EXPECT_EQ(s.seek_frames, 18);

  // One segment without a pair: it ends at its last timestamp, or the window's end.
  s = split_segments({ts(0), 3, 4, ts(70)}, T, 2500);
  ASSERT_EQ(s.spans.size(), 1u);
  EXPECT_EQ(s.spans[0].end_ts, 70);
  EXPECT_EQ(s.seek_frames, 2500);
  s = split_segments({ts(0), 3, 4}, T, 2501);
  EXPECT_DOUBLE_EQ(s.spans[0].end_ts, 1250.5);
  s = split_segments({3, 4}, T, 3000);  // no timestamps at all
  EXPECT_DOUBLE_EQ(s.spans[0].end_ts, 1500);
}

TEST(WhisperDecoding, LongAudioSeeksOnTimestampsAndCarriesThePrompt) {
  FakeModel fake;
  // Window 0 (seek 0): "w1" 0-10 s, "w2" 10-20 s, then an unfinished "w3" (dropped, seek to 20 s).
  // Window 1 (seek 2000, 20 s of content): "w3" 0-8 s, single closing timestamp.
  const std::vector<int32_t> w0 = {ts(0), 1, ts(500), ts(500), 2, ts(1000), ts(1000), 3};
  const std::vector<int32_t> w1 = {ts(0), 3, ts(400)};
  fake.script = [&](int w, const std::vector<int32_t>& h, const std::vector<int32_t>& s) {
    return say(w == 0 ? w0 : w1)(w, h, s);
  };
  WindowModel m = fake.bind();
  TranscribeOptions opt;
  std::vector<std::pair<double, double>> progress;
  opt.progress = [&](double done, double total) { progress.emplace_back(done, total); };
  WindowOptions o = tiny_options();
  SeekResult r = transcribe_frames(4000, {T.sot}, {7}, T, opt, o, m);
  EXPECT_EQ(fake.encoded, (std::vector<std::pair<int64_t, int64_t>>{{0, 3000}, {2000, 2000}}));
  ASSERT_EQ(r.segments.size(), 3u);
  EXPECT_DOUBLE_EQ(r.segments[0].start, 0.0);
  EXPECT_DOUBLE_EQ(r.segments[0].end, 10.0);
  EXPECT_EQ(r.segments[0].text, " w1");
  EXPECT_DOUBLE_EQ(r.segments[1].start, 10.0);
  EXPECT_DOUBLE_EQ(r.segments[1].end, 20.0);
  EXPECT_EQ(r.segments[2].seek, 2000);
  EXPECT_DOUBLE_EQ(r.segments[2].start, 20.0);
  EXPECT_DOUBLE_EQ(r.segments[2].end, 28.0);
  EXPECT_EQ(r.segments[2].text, " w3");
  EXPECT_EQ(r.segments[2].id, 2);
  // The initial prompt opens the first window; the first window's segments prompt the second.
  ASSERT_EQ(fake.first_feeds.size(), 2u);
  EXPECT_EQ(fake.first_feeds[0], (std::vector<int32_t>{T.sot_prev, 7, T.sot}));
  std::vector<int32_t> second = {T.sot_prev, 7, ts(0), 1, ts(500), ts(500), 2, ts(1000), T.sot};
  EXPECT_EQ(fake.first_feeds[1], second);
  EXPECT_EQ(r.initial_prompt_tokens, 1u);
  EXPECT_EQ(r.all_tokens.size(), 1u + 6u + 3u);
  EXPECT_EQ(r.windows, 2);
  EXPECT_EQ(progress, (std::vector<std::pair<double, double>>{{20.0, 40.0}, {40.0, 40.0}}));
}

TEST(WhisperDecoding, SilentWindowIsSkippedAndHotWindowResetsThePrompt) {
  FakeModel fake;
  fake.script = [&](int w, const std::vector<int32_t>& h, const std::vector<int32_t>& s) {
    std::vector<float> x = flat();  // window 0: uniform guesses, sure of no speech
    if (w == 0 && h.back() == T.sot) x[T.no_speech] = 40.0f;
    if (s.size() >= 3) x[T.eot] = 30.0f;
    if (w == 1) x = say({ts(0), 4, ts(100)})(w, h, s);
    return x;
  };
  WindowModel m = fake.bind();
  TranscribeOptions opt;
  opt.condition_on_previous_text = false;
  SeekResult r = transcribe_frames(3500, {T.sot}, {}, T, opt, tiny_options(), m);
  EXPECT_EQ(fake.encoded, (std::vector<std::pair<int64_t, int64_t>>{{0, 3000}, {3000, 500}}));
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_DOUBLE_EQ(r.segments[0].start, 30.0);
  EXPECT_DOUBLE_EQ(r.segments[0].end, 32.0);
  EXPECT_EQ(fake.first_feeds.back(), (std::vector<int32_t>{T.sot}));  // nothing carried over
}

}  // namespace
}  // namespace xdna::whisper
