// The tar reader on archives NeMo itself wrote (tests/fixtures/conformer/archives, by
// scripts/make_conformer_archives.py), on Python tarfile's pax / GNU / ustar long-name layouts,
// gzipped, and on each kind of damage.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "weights/nemo_archive.h"
#include "weights/torch_checkpoint.h"

using namespace xdna;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/conformer/archives/";
const std::string kLongName =
    std::string(60, 'd') + "/" + std::string(90, 'n') + "_tokenizer.model";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::shared_ptr<Buffer> buffer_of(const std::string& bytes) {
  auto b = std::make_shared<HeapBuffer>(bytes.empty() ? 1 : bytes.size());
  std::memcpy(b->data(), bytes.data(), bytes.size());
  return std::make_shared<BufferSlice>(b, 0, bytes.size());
}

std::string gzip(const std::string& raw) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, raw.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string error_of(const std::string& bytes) {
  try {
    TarArchive t(buffer_of(bytes), "test.nemo");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Rewrites header field [at, at + len) and fixes the header's checksum.
void patch_header(std::string& tar, size_t header, size_t at, const std::string& value) {
  std::memcpy(tar.data() + header + at, value.data(), value.size());
  std::memset(tar.data() + header + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[header + i]);
  char chk[8];
  std::snprintf(chk, sizeof chk, "%06o", sum);
  std::memcpy(tar.data() + header + 148, chk, 7);
}

}  // namespace

TEST(NemoArchive, ReadsAnArchiveNemoWrote) {
  TarArchive tar(kDir + "parakeet_ctc_bpe.nemo");
  EXPECT_FALSE(tar.gzipped());
  const TarMember* yaml = tar.find("model_config.yaml");
  ASSERT_NE(yaml, nullptr);
  EXPECT_EQ(tar.find("./model_config.yaml"), yaml);  // NeMo stores "./" names
  EXPECT_NE(tar.read(*yaml).find("ConformerEncoder"), std::string::npos);
  const TarMember* tok = tar.find_suffix("tokenizer.model");
  ASSERT_NE(tok, nullptr);
  EXPECT_NE(tok->name, "tokenizer.model");  // prefixed with a hash
  EXPECT_EQ(tok->offset % 512, 0u);
  const TarMember* ckpt = tar.find("model_weights.ckpt");
  ASSERT_NE(ckpt, nullptr);
  TorchCheckpoint weights(tar.slice(*ckpt), "model_weights.ckpt");  // views into the mapped archive
  EXPECT_TRUE(weights.contains("encoder.pre_encode.out.weight"));
  EXPECT_TRUE(weights.contains("decoder.decoder_layers.0.weight"));
  const Tensor w = weights.get("encoder.pre_encode.out.weight");
  EXPECT_EQ(w.shape()[0], 32);
  EXPECT_EQ(tar.find("missing.yaml"), nullptr);
}

TEST(NemoArchive, LongNamesInEachHeaderFormat) {
  for (const char* tag : {"pax", "gnu"}) {
    SCOPED_TRACE(tag);
    TarArchive tar(kDir + "small_" + tag + ".tar");
    ASSERT_EQ(tar.members().size(), 3u);
    const TarMember* tok = tar.find(kLongName);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tar.read(*tok), "piece bytes");
    EXPECT_EQ(tar.find_suffix("tokenizer.model"), tok);
    EXPECT_EQ(tar.read(*tar.find("model_config.yaml")), "encoder:\n  d_model: 4\n");
    EXPECT_EQ(tar.find("empty.txt")->size, 0u);
  }
  TarArchive ustar(kDir + "small_ustar.tar");  // name split into prefix + name
  EXPECT_NE(ustar.find(std::string(60, 'd') + "/" + std::string(20, 'n') + "_tokenizer.model"), nullptr);
}

TEST(NemoArchive, GzipArchives) {
  TarArchive small(kDir + "small_pax.tar.gz");  // Python's gzip
  EXPECT_TRUE(small.gzipped());
  EXPECT_EQ(small.read(*small.find(kLongName)), "piece bytes");
  const std::string raw = slurp(kDir + "parakeet_tdt_bpe.nemo");
  TarArchive plain(buffer_of(raw), "plain");
  TarArchive zipped(buffer_of(gzip(raw)), "zipped");  // as NeMo < 1.x wrote them (w:gz)
  ASSERT_EQ(zipped.members().size(), plain.members().size());
  for (size_t i = 0; i < plain.members().size(); ++i) {
    EXPECT_EQ(zipped.members()[i].name, plain.members()[i].name);
    EXPECT_EQ(zipped.read(zipped.members()[i]), plain.read(plain.members()[i]));
  }
}

TEST(NemoArchive, DamageIsNamed) {
  const std::string raw = slurp(kDir + "parakeet_ctc_bpe.nemo");
  const TarArchive good(buffer_of(raw), "good");
  const TarMember& ckpt = *good.find("model_weights.ckpt");

  // Cut inside a member.
  std::string e = error_of(raw.substr(0, ckpt.offset + ckpt.size / 2));
  EXPECT_NE(e.find("member model_weights.ckpt"), std::string::npos) << e;
  EXPECT_NE(e.find("runs past the end of the archive"), std::string::npos) << e;
  // Cut on a member boundary: no end-of-archive block.
  e = error_of(raw.substr(0, ckpt.offset - 512));
  EXPECT_NE(e.find("without its end-of-archive block"), std::string::npos) << e;
  // A size field claiming more than the archive holds.
  std::string big = raw;
  patch_header(big, ckpt.offset - 512, 124, "77777777777");
  e = error_of(big);
  EXPECT_NE(e.find("runs past the end"), std::string::npos) << e;
  // A flipped byte in a header.
  std::string flipped = raw;
  flipped[ckpt.offset - 512 + 3] ^= 0x20;
  e = error_of(flipped);
  EXPECT_NE(e.find("bad checksum"), std::string::npos) << e;
  // Not a tar at all, empty, truncated gzip.
  EXPECT_NE(error_of(std::string(1024, 'x')).find("bad checksum"), std::string::npos);
  EXPECT_NE(error_of("").find("without its end-of-archive block"), std::string::npos);
  const std::string gz = gzip(raw);
  e = error_of(gz.substr(0, gz.size() / 2));
  EXPECT_NE(e.find("gzip"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // A malformed pax record.
  std::string pax = slurp(kDir + "small_pax.tar");
  const size_t rec = pax.find(" path=");
  ASSERT_NE(rec, std::string::npos);
  pax[rec - 1] = 'z';  // the record length digit
  e = error_of(pax);
  EXPECT_NE(e.find("pax record"), std::string::npos) << e;
}

TEST(NemoArchive, SliceBoundsAreChecked) {
  auto b = std::make_shared<HeapBuffer>(100);
  EXPECT_THROW(BufferSlice(b, 90, 11), std::invalid_argument);
  EXPECT_THROW(BufferSlice(b, 101, 0), std::invalid_argument);
  EXPECT_EQ(BufferSlice(b, 90, 10).size(), 10u);
}
