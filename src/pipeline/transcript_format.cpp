// format_transcript (pipeline/transcribe.h): a Transcript as the text formats openai-whisper's
// writers produce and OpenAI's /v1/audio/transcriptions returns (response_format).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "pipeline/transcribe.h"

namespace xdna {

namespace {

// Whisper's language names (whisper/tokenizer.py LANGUAGES): verbose_json reports "english", not
// "en", as OpenAI's API does.
constexpr std::pair<const char*, const char*> kLanguageNames[] = {
    {"en", "english"}, {"zh", "chinese"}, {"de", "german"}, {"es", "spanish"}, {"ru", "russian"},
    {"ko", "korean"}, {"fr", "french"}, {"ja", "japanese"}, {"pt", "portuguese"},
    {"tr", "turkish"}, {"pl", "polish"}, {"ca", "catalan"}, {"nl", "dutch"}, {"ar", "arabic"},
    {"sv", "swedish"}, {"it", "italian"}, {"id", "indonesian"}, {"hi", "hindi"}, {"fi", "finnish"},
    {"vi", "vietnamese"}, {"he", "hebrew"}, {"uk", "ukrainian"}, {"el", "greek"}, {"ms", "malay"},
    {"cs", "czech"}, {"ro", "romanian"}, {"da", "danish"}, {"hu", "hungarian"}, {"ta", "tamil"},
    {"no", "norwegian"}, {"th", "thai"}, {"ur", "urdu"}, {"hr", "croatian"}, {"bg", "bulgarian"},
    {"lt", "lithuanian"}, {"la", "latin"}, {"mi", "maori"}, {"ml", "malayalam"}, {"cy", "welsh"},
    {"sk", "slovak"}, {"te", "telugu"}, {"fa", "persian"}, {"lv", "latvian"}, {"bn", "bengali"},
    {"sr", "serbian"}, {"az", "azerbaijani"}, {"sl", "slovenian"}, {"kn", "kannada"},
    {"et", "estonian"}, {"mk", "macedonian"}, {"br", "breton"}, {"eu", "basque"},
    {"is", "icelandic"}, {"hy", "armenian"}, {"ne", "nepali"}, {"mn", "mongolian"},
    {"bs", "bosnian"}, {"kk", "kazakh"}, {"sq", "albanian"}, {"sw", "swahili"}, {"gl", "galician"},
    {"mr", "marathi"}, {"pa", "punjabi"}, {"si", "sinhala"}, {"km", "khmer"}, {"sn", "shona"},
    {"yo", "yoruba"}, {"so", "somali"}, {"af", "afrikaans"}, {"oc", "occitan"}, {"ka", "georgian"},
    {"be", "belarusian"}, {"tg", "tajik"}, {"sd", "sindhi"}, {"gu", "gujarati"}, {"am", "amharic"},
    {"yi", "yiddish"}, {"lo", "lao"}, {"uz", "uzbek"}, {"fo", "faroese"}, {"ht", "haitian creole"},
    {"ps", "pashto"}, {"tk", "turkmen"}, {"nn", "nynorsk"}, {"mt", "maltese"}, {"sa", "sanskrit"},
    {"lb", "luxembourgish"}, {"my", "myanmar"}, {"bo", "tibetan"}, {"tl", "tagalog"},
    {"mg", "malagasy"}, {"as", "assamese"}, {"tt", "tatar"}, {"haw", "hawaiian"},
    {"ln", "lingala"}, {"ha", "hausa"}, {"ba", "bashkir"}, {"jw", "javanese"}, {"su", "sundanese"},
    {"yue", "cantonese"},
};

std::string language_name(const std::string& code) {
  for (const auto& [c, name] : kLanguageNames)
    if (code == c) return name;
  return code;  // already a name, or a code this table does not know: passed through
}

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A float as the double its shortest decimal form denotes (0.2f -> 0.2, not 0.20000000298...), so
// the JSON reads as the value was computed.
double tidy(float f) {
  if (!std::isfinite(f)) return f;
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// Seconds to the millisecond (segment times are multiples of 20 ms plus the window offset).
double millis(double s) { return std::nearbyint(s * 1000.0) / 1000.0; }

// openai-whisper's format_timestamp: round to milliseconds (half to even, as Python's round),
// then [HH:]MM:SS<marker>mmm. Negative times (never produced) clamp to zero.
std::string timestamp(double seconds, char decimal_marker) {
  const double ms_f = std::nearbyint(std::max(0.0, seconds) * 1000.0);
  int64_t ms = static_cast<int64_t>(ms_f);
  const int64_t h = ms / 3600000;
  ms -= h * 3600000;
  const int64_t m = ms / 60000;
  ms -= m * 60000;
  const int64_t s = ms / 1000;
  ms -= s * 1000;
  char buf[80];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld%c%03lld", static_cast<long long>(h),
                static_cast<long long>(m), static_cast<long long>(s), decimal_marker,
                static_cast<long long>(ms));
  return buf;
}

// A cue's text: the segment's, stripped, and "-->" (the cue-timing arrow) defused as upstream.
std::string cue_text(const std::string& text) {
  std::string t = strip(text);
  for (size_t p = t.find("-->"); p != std::string::npos; p = t.find("-->", p + 2)) t.replace(p, 3, "->");
  return t;
}

// A word as openai-whisper's JSON holds it (leading space kept); OpenAI's top-level "words"
// strip it.
nlohmann::json word_json(const TranscriptWord& w, bool stripped) {
  return {{"word", stripped ? strip(w.word) : w.word},
          {"start", millis(w.start)},
          {"end", millis(w.end)},
          {"probability", tidy(w.probability)}};
}

nlohmann::json all_words_json(const Transcript& t) {
  nlohmann::json words = nlohmann::json::array();
  for (const TranscriptSegment& s : t.segments)
    for (const TranscriptWord& w : s.words) words.push_back(word_json(w, true));
  return words;
}

nlohmann::json segment_json(const TranscriptSegment& s, bool with_words) {
  nlohmann::json j = {{"id", s.id},
          {"seek", s.seek},
          {"start", millis(s.start)},
          {"end", millis(s.end)},
          {"text", s.text},
          {"tokens", s.tokens},
          {"temperature", tidy(s.temperature)},
          {"avg_logprob", tidy(s.avg_logprob)},
          {"compression_ratio", tidy(s.compression_ratio)},
          {"no_speech_prob", tidy(s.no_speech_prob)}};
  if (with_words) {
    nlohmann::json words = nlohmann::json::array();
    for (const TranscriptWord& w : s.words) words.push_back(word_json(w, false));
    j["words"] = std::move(words);
  }
  return j;
}

}  // namespace

std::string format_transcript(const Transcript& t, const std::string& format, const std::string& task,
                              bool include_segments) {
  // Invalid UTF-8 (a token split mid-character) becomes U+FFFD rather than an exception.
  const auto dump = [](const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (format == "text") return strip(t.text) + "\n";
  if (format == "txt") {  // openai-whisper's WriteTXT: one stripped segment per line
    std::string out;
    for (const TranscriptSegment& s : t.segments) out += strip(s.text) + "\n";
    return out;
  }
  if (format == "json") {
    nlohmann::json j = {{"text", strip(t.text)}};
    if (t.word_timestamps) j["words"] = all_words_json(t);
    return dump(j) + "\n";
  }
  if (format == "verbose_json") {
    nlohmann::json j = {{"task", task},
                        {"language", language_name(t.language)},
                        {"duration", millis(t.duration)},
                        {"text", strip(t.text)}};
    if (t.word_timestamps) j["words"] = all_words_json(t);
    if (include_segments) {
      nlohmann::json segments = nlohmann::json::array();
      for (const TranscriptSegment& s : t.segments) segments.push_back(segment_json(s, t.word_timestamps));
      j["segments"] = std::move(segments);
    }
    return dump(j) + "\n";
  }
  if (format == "srt") {
    std::string out;
    int64_t cue = 1;
    for (const TranscriptSegment& s : t.segments)
      out += std::to_string(cue++) + "\n" + timestamp(s.start, ',') + " --> " + timestamp(s.end, ',') + "\n" +
             cue_text(s.text) + "\n\n";
    return out;
  }
  if (format == "vtt") {  // hours always shown, as OpenAI's API (openai-whisper's writer drops "00:")
    std::string out = "WEBVTT\n\n";
    for (const TranscriptSegment& s : t.segments)
      out += timestamp(s.start, '.') + " --> " + timestamp(s.end, '.') + "\n" + cue_text(s.text) + "\n\n";
    return out;
  }
  throw std::invalid_argument("unknown transcript format '" + format +
                              "' (known: text, txt, json, verbose_json, srt, vtt)");
}

}  // namespace xdna
