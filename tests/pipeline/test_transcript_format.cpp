// format_transcript: the text/json/verbose_json/srt/vtt outputs of a hand-made transcript, checked
// against what openai-whisper's writers (whisper/utils.py) and OpenAI's API print for it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "pipeline/transcribe.h"

using namespace xdna;
using nlohmann::json;

namespace {

Transcript sample() {
  Transcript t;
  t.text = " Hello world. Second --> part.";
  t.language = "en";
  t.duration = 3725.4567;  // over an hour: the hours field is exercised
  TranscriptSegment a;
  a.id = 0;
  a.seek = 0;
  a.start = 0.0;
  a.end = 2.0;
  a.text = " Hello world.";
  a.tokens = {50363, 15496, 995, 13};
  a.temperature = 0.2f;
  a.avg_logprob = -0.25f;
  a.compression_ratio = 0.8f;
  a.no_speech_prob = 0.0125f;
  TranscriptSegment b;
  b.id = 1;
  b.seek = 372000;
  b.start = 3723.4;
  b.end = 3725.0005;  // half a millisecond: rounds to even (.000), as Python's round()
  b.text = " Second --> part.";
  b.tokens = {12211};
  t.segments = {a, b};
  return t;
}

TEST(TranscriptFormat, TextIsStrippedWithNewline) {
  EXPECT_EQ(format_transcript(sample(), "text"), "Hello world. Second --> part.\n");
}

TEST(TranscriptFormat, TxtIsOneStrippedSegmentPerLine) {
  EXPECT_EQ(format_transcript(sample(), "txt"), "Hello world.\nSecond --> part.\n");
}

TEST(TranscriptFormat, JsonHasOnlyText) {
  const json j = json::parse(format_transcript(sample(), "json"));
  EXPECT_EQ(j, json({{"text", "Hello world. Second --> part."}}));
}

TEST(TranscriptFormat, VerboseJsonHasOpenAiShape) {
  const std::string out = format_transcript(sample(), "verbose_json", "translate");
  const json j = json::parse(out);
  EXPECT_EQ(j["task"], "translate");
  EXPECT_EQ(j["language"], "english");
  EXPECT_DOUBLE_EQ(j["duration"].get<double>(), 3725.457);
  EXPECT_EQ(j["text"], "Hello world. Second --> part.");
  ASSERT_EQ(j["segments"].size(), 2u);
  const json& s = j["segments"][0];
  for (const char* key : {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                          "compression_ratio", "no_speech_prob"})
    EXPECT_TRUE(s.contains(key)) << key;
  EXPECT_EQ(s.size(), 10u);
  EXPECT_EQ(s["text"], " Hello world.");  // segment text keeps its leading space, as upstream
  EXPECT_EQ(s["tokens"], json({50363, 15496, 995, 13}));
  EXPECT_EQ(j["segments"][1]["seek"], 372000);
  EXPECT_EQ(j["segments"][1]["id"], 1);
  // Floats print as their shortest form, not as the widened double.
  EXPECT_NE(out.find("\"temperature\":0.2,"), std::string::npos) << out;
  EXPECT_NE(out.find("\"no_speech_prob\":0.0125"), std::string::npos) << out;
  EXPECT_DOUBLE_EQ(j["segments"][1]["start"].get<double>(), 3723.4);
}

TEST(TranscriptFormat, VerboseJsonLanguageNames) {
  Transcript t = sample();
  t.language = "de";
  EXPECT_EQ(json::parse(format_transcript(t, "verbose_json"))["language"], "german");
  t.language = "yue";
  EXPECT_EQ(json::parse(format_transcript(t, "verbose_json"))["language"], "cantonese");
  t.language = "xx";  // not in Whisper's table: passed through
  EXPECT_EQ(json::parse(format_transcript(t, "verbose_json"))["language"], "xx");
  EXPECT_EQ(json::parse(format_transcript(t, "verbose_json"))["task"], "transcribe");
}

TEST(TranscriptFormat, SrtCuesAreOneBasedWithCommaMillis) {
  EXPECT_EQ(format_transcript(sample(), "srt"),
            "1\n00:00:00,000 --> 00:00:02,000\nHello world.\n\n"
            "2\n01:02:03,400 --> 01:02:05,000\nSecond -> part.\n\n");
}

TEST(TranscriptFormat, VttHasHeaderAndDotMillis) {
  EXPECT_EQ(format_transcript(sample(), "vtt"),
            "WEBVTT\n\n"
            "00:00:00.000 --> 00:00:02.000\nHello world.\n\n"
            "01:02:03.400 --> 01:02:05.000\nSecond -> part.\n\n");
}

TEST(TranscriptFormat, EmptyTranscript) {
  Transcript t;
  EXPECT_EQ(format_transcript(t, "text"), "\n");
  EXPECT_EQ(format_transcript(t, "srt"), "");
  EXPECT_EQ(format_transcript(t, "vtt"), "WEBVTT\n\n");
  const json j = json::parse(format_transcript(t, "verbose_json"));
  EXPECT_TRUE(j["segments"].is_array());
  EXPECT_TRUE(j["segments"].empty());
}

TEST(TranscriptFormat, InvalidUtf8IsReplacedNotThrown) {
  Transcript t = sample();
  t.text = "caf\xc3";  // a character cut in half
  EXPECT_EQ(json::parse(format_transcript(t, "json"))["text"], "caf\xef\xbf\xbd");
}

TEST(TranscriptFormat, UnknownFormatListsTheKnownOnes) {
  try {
    format_transcript(sample(), "tsv");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'tsv'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("verbose_json"), std::string::npos) << msg;
  }
}

}  // namespace
