// Conformer ASR models as data: NVIDIA's FastConformer (Parakeet CTC / RNN-T / TDT) and Sber's
// GigaAM (CTC / RNN-T) are one encoder implementation with a ConformerConfig each, plus a head.
//
//   samples -> log-mel (the model's own frontend, ConformerMelConfig)
//           -> subsampling (conv stack, 4x or 8x in time) -> xscaling
//           -> N conformer blocks: x + 0.5 FF(LN x); x + MHSA(LN x) with relative (Transformer-XL)
//              or rotary positions; x + Conv(LN x) [pointwise -> GLU -> depthwise -> norm -> SiLU
//              -> pointwise]; x + 0.5 FF(LN x); LN
//           -> head: CTC (linear + greedy collapse), RNN-T or TDT (LSTM prediction network + joint
//              network, greedy decoding; TDT also predicts how many frames to skip).
//
// Weights keep the NeMo checkpoint names, which GigaAM's checkpoints share:
// "encoder.pre_encode.conv.0.weight", "encoder.layers.3.self_attn.linear_q.weight",
// "encoder.layers.3.conv.batch_norm.running_mean", "decoder.decoder_layers.0.weight" (CTC),
// "decoder.prediction.embed.weight", "decoder.prediction.dec_rnn.lstm.weight_ih_l0",
// "joint.enc.weight", "joint.pred.weight", "joint.joint_net.2.weight" (RNN-T/TDT; "joint_net.1" in
// NeMo models without joint dropout; GigaAM's RNN-T head is "head.decoder.embed",
// "head.decoder.lstm.*", "head.joint.{enc,pred,joint_net.1}", checked against NeMo 3.0.0 / gigaam
// 0.1.0 by scripts/make_transducer_fixtures.py). Loaders of other
// layouts (transformers' Parakeet checkpoints) rename to these. Batch norm is folded into the
// depthwise convolution at load.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/graph.h"  // RunReport
#include "core/tensor.h"
#include "weights/source.h"

namespace xdna {

// The model's log-mel frontend (NeMo's AudioToMelSpectrogramPreprocessor; GigaAM's torchaudio
// MelSpectrogram + log clamp). Field names follow NeMo's preprocessor config.
struct ConformerMelConfig {
  int sample_rate = 16000;
  int n_fft = 512;
  int win_length = 400;  // samples (NeMo: window_size 0.025 s)
  int hop_length = 160;  // samples (NeMo: window_stride 0.01 s)
  int n_mels = 80;       // NeMo: features
  float preemphasis = 0.97f;       // 0 = none
  std::string window = "hann";     // "hann" (periodic=false as NeMo) ...
  bool center = true;              // reflect/zero pad n_fft/2 each side (pad mode per frontend)
  std::string pad_mode = "constant";  // NeMo pads with zeros; torchaudio defaults to "reflect"
  std::string mel_norm = "slaney";    // "slaney" area normalisation, or "none"
  std::string mel_scale = "slaney";   // "slaney" or "htk"
  float mag_power = 2.0f;
  std::string log = "add";            // "add": log(x + guard); "clamp": log(clamp(x, guard, 1e9))
  float log_guard = 5.960464477539063e-08f;  // NeMo: 2^-24
  std::string normalize = "per_feature";     // "per_feature" (mean/std over time) or "none"
  // NeMo's seq_len, floor((samples + 2 (n_fft / 2) - n_fft) / hop), leaves out the last centred
  // frame (masked to zero upstream): true returns only the valid frames. GigaAM keeps them all.
  // window also takes "hann_periodic" (torch.hann_window's default, torchaudio), "hamming", "ones".
  bool drop_last_frame = true;
  // The window (win_length values) and mel filterbank (n_mels rows of n_fft / 2 + 1, row-major)
  // as the checkpoint stores them, widened to f32 (GigaAM v3 keeps both in bfloat16 and computes
  // with those values); empty: computed from the fields above.
  std::vector<float> window_values;
  std::vector<float> filterbank;
};

struct ConformerConfig {
  std::string family;  // "parakeet" or "gigaam": for messages and the catalog
  // Subsampling: "dw_striding" (FastConformer: conv2d then depthwise+pointwise conv2d pairs) or
  // "striding" (plain conv2d + ReLU stacks, GigaAM v1/v2) or "conv1d" (conv1d + ReLU stacks over
  // time with the mels as channels and no output linear, GigaAM v3); factor 4 or 8.
  std::string subsampling = "dw_striding";
  int64_t subsampling_factor = 8;
  int64_t subsampling_channels = 256;
  int64_t subsampling_kernel = 3;
  int64_t n_mels = 80;  // encoder input features (feat_in)
  int64_t d_model = 1024;
  int64_t n_layers = 24;
  int64_t n_heads = 8;
  int64_t ff_dim = 4096;
  int64_t conv_kernel = 9;
  std::string self_attention = "rel_pos";  // "rel_pos" (Transformer-XL, pos_bias_u/v) or "rotary"
  int64_t pos_emb_max_len = 5000;
  float rotary_base = 10000.0f;  // GigaAM passes pos_emb_max_len (5000) as its rotary base
  bool xscaling = true;  // multiply the subsampled features by sqrt(d_model)
  bool attention_bias = true;
  bool conv_bias = true;
  bool ff_bias = true;
  std::string conv_norm = "batch_norm";  // "batch_norm" (folded at load) or "layer_norm" (GigaAM v3)
  float layer_norm_eps = 1e-5f;
  float batch_norm_eps = 1e-5f;  // conv module batch norm (folded at load)

  // Head.
  std::string head = "ctc";   // "ctc", "rnnt" or "tdt"
  int64_t vocab_size = 0;     // tokens without the blank; blank id = vocab_size
  int64_t pred_hidden = 640;  // RNN-T/TDT prediction network (embedding + LSTM) width
  int64_t pred_layers = 1;    // LSTM layers
  int64_t joint_hidden = 640;
  std::vector<int64_t> durations;  // TDT: frames each duration class advances ({0,1,2,3,4})
  int64_t max_symbols_per_step = 10;

  ConformerMelConfig mel;

  int64_t head_dim() const { return d_model / n_heads; }
  // Encoder frames for `mel_frames` input frames (the subsampling's output length).
  int64_t encoded_frames(int64_t mel_frames) const;
};

// The encoder for a number of mel frames as the chain of graphs encode() runs, built but not run
// (for `npu plan`): graphs[i] (i < n_layers) ends at layer i's convolution module with outputs
// (residual stream [T, d], pointwise_conv1 [T, 2d]); host_steps[i], GLU + depthwise conv1d (batch
// norm folded) + SiLU, runs directly on the host between graphs[i] and graphs[i + 1] (the op set
// has no sigmoid for the GLU); graphs[i + 1] takes the residual and that step's output as
// inputs "layers.i.conv.residual_in" / "layers.i.conv.depthwise_out". The last graph outputs the
// encoder output [T, d]. Inputs hold uninitialised placeholders of the right shapes; weights are
// the model's.
struct ConformerEncoderGraphs {
  int64_t frames = 0, encoded_frames = 0;
  std::vector<Graph> graphs;            // n_layers + 1
  std::vector<std::string> host_steps;  // n_layers, named as encode()'s RunReport names them
};

class ConformerModel {
 public:
  // Resolves and shape-checks every weight the config needs (folding batch norm); throws
  // std::runtime_error naming the missing or mis-shaped tensor.
  ConformerModel(ConformerConfig config, std::shared_ptr<const WeightSource> weights,
                 std::vector<std::string> vocabulary);

  const ConformerConfig& config() const { return config_; }
  const WeightSource& weights() const { return *source_; }
  // Token pieces by id (SentencePiece pieces with U+2581 for a leading space; GigaAM's CTC
  // models use single characters). Size == config.vocab_size.
  const std::vector<std::string>& vocabulary() const { return vocabulary_; }

  // features [n_mels, frames] f32 (pipeline/conformer_features.h) -> encoder output [T, d_model] f32,
  // T = config.encoded_frames(frames). std::invalid_argument stating the expected shape otherwise.
  Tensor encode(const Tensor& features, std::vector<Backend*> backends = {},
                RunReport* report = nullptr) const;

  // The graphs encode() would run for `frames` feature frames; std::invalid_argument when they
  // give no encoder frame.
  ConformerEncoderGraphs lower_encoder(int64_t frames) const;

  // CTC head: encoder output [T, d_model] -> log-probabilities [T, vocab_size + 1].
  Tensor ctc_log_probs(const Tensor& encoded) const;

 private:
  friend struct ConformerEncoderBuild;  // conformer.cpp: the graph building encode() and lower_encoder() share
  ConformerConfig config_;
  std::shared_ptr<const WeightSource> source_;
  std::vector<std::string> vocabulary_;
  struct Weights;  // resolved per-layer views and load-time folds (conformer.cpp)
  std::shared_ptr<const Weights> w_;
};

// ---- Decoding (conformer_decode.cpp) -------------------------------------------------------

// One hypothesis token with the encoder frame where it was emitted (for timestamps).
struct AsrToken {
  int32_t id = 0;
  int64_t frame = 0;
  int64_t duration = 0;  // TDT: frames the token's duration class advanced (0 for CTC/RNN-T)
};

// Greedy CTC: argmax per frame, merge repeats, drop blanks.
std::vector<AsrToken> ctc_greedy(const Tensor& log_probs, int64_t blank_id);
// Greedy RNN-T (config.head == "rnnt") or TDT ("tdt") over encoder output [T, d_model], as
// NeMo's greedy batch decoder with batch 1: at most max_symbols_per_step tokens per frame.
std::vector<AsrToken> transducer_greedy(const ConformerModel& model, const Tensor& encoded);

// Token ids -> text: pieces concatenated, U+2581 -> space, leading space trimmed.
std::string detokenize(const ConformerModel& model, const std::vector<AsrToken>& tokens);

// The RNN-T / TDT head resolved once from config + weights (no encoder weights needed): prediction
// network (embedding + LSTM, PyTorch gate order i, f, g, o) and joint network
// (out(relu(enc(x) + pred(g)))). Views into the source; LSTM biases summed into f32 copies.
// NeMo names (above); GigaAM's own ("head.decoder.embed.weight", "head.decoder.lstm.*",
// "head.joint.{enc,pred}.*", "head.joint.joint_net.1.*") are accepted too, and NeMo's
// "joint.joint_net.1.*" (no joint dropout).
struct TransducerHead {
  ConformerConfig config;
  Tensor embed;                              // [vocab_size + 1, pred_hidden]
  std::vector<Tensor> w_ih, w_hh, lstm_bias; // per layer: [4 pred_hidden, pred_hidden] x2, [4 pred_hidden]
  Tensor enc_w, enc_b;                       // [joint_hidden, d_model], [joint_hidden]
  Tensor pred_w, pred_b;                     // [joint_hidden, pred_hidden], [joint_hidden]
  Tensor out_w, out_b;                       // [vocab_size + 1 + durations, joint_hidden], [...]
};
// Throws std::invalid_argument for a config that is not "rnnt"/"tdt" or is inconsistent, and
// std::runtime_error naming a missing or mis-shaped weight.
TransducerHead load_transducer_head(const ConformerConfig& config, const WeightSource& weights);
std::vector<AsrToken> transducer_greedy(const TransducerHead& head, const Tensor& encoded);
std::vector<AsrToken> transducer_greedy(const ConformerConfig& config, const WeightSource& weights,
                                        const Tensor& encoded);
std::string detokenize(const std::vector<std::string>& vocabulary, const std::vector<AsrToken>& tokens);

// ---- Loading (src/models/conformer_load.cpp) -----------------------------------------------

// A NeMo .nemo archive (model_config.yaml + model_weights.ckpt + tokenizer), a GigaAM checkpoint
// (.ckpt with its config, + *_tokenizer.model beside it), a transformers Parakeet checkpoint
// directory (config.json + model.safetensors, renamed to NeMo keys), or a store directory holding
// one of these. Throws std::runtime_error naming what is missing or unsupported.
std::shared_ptr<ConformerModel> load_conformer(const std::string& path);

// What load_conformer reads before constructing the model (each step exposed for tests).
struct ConformerCheckpoint {
  ConformerConfig config;
  std::shared_ptr<const WeightSource> weights;  // under NeMo's tensor names
  std::vector<std::string> vocabulary;          // config.vocab_size pieces, blank excluded
  std::string format;                           // "nemo", "gigaam" or "transformers"
};
ConformerCheckpoint read_conformer_checkpoint(const std::string& path);
// A .nemo model_config.yaml -> config (encoder, preprocessor, head; vocab_size from the decoder /
// joint sections). `where` prefixes error messages, which name the offending key.
ConformerConfig conformer_config_from_nemo_yaml(const std::string& yaml_text, const std::string& where);
// GigaAM's checkpoint "cfg" (as TorchCheckpoint::metadata()["objects"]["cfg"] gives it).
ConformerConfig conformer_config_from_gigaam(const nlohmann::json& cfg, const std::string& where);
// transformers' Parakeet config.json (+ preprocessor_config.json, may be null).
ConformerConfig conformer_config_from_hf_parakeet(const nlohmann::json& config, const nlohmann::json& preprocessor,
                                                  const std::string& where);
// Tensor names of the other layouts -> NeMo's ("" for tensors the engine does not use).
std::string parakeet_hf_to_nemo_name(const std::string& hf_name);
std::string gigaam_to_nemo_name(const std::string& gigaam_name);
// The pieces of a SentencePiece model (tokenizer.model bytes), by id.
std::vector<std::string> sentencepiece_pieces(const std::string& model_bytes, const std::string& where);

}  // namespace xdna
