// Greedy decoding of the conformer ASR heads: CTC collapse, and RNN-T / TDT with the LSTM
// prediction network and joint network, as NeMo's label-looping greedy decoder with batch 1
// (rnnt_label_looping.py / tdt_label_looping.py), which transformers' Parakeet generate() and
// GigaAM's RNNTGreedyDecoding reproduce for RNN-T.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/matmul.h"
#include "models/conformer.h"

namespace xdna {
namespace {

std::string shape_of(const Tensor& t) { return shape_str(t.shape()); }

// First of `names` the source holds (NeMo's name first, then GigaAM's), or a runtime_error.
Tensor pick(const WeightSource& w, const std::vector<std::string>& names, const Shape& want) {
  for (const std::string& name : names) {
    if (!w.contains(name)) continue;
    Tensor t = w.get(name);
    if (t.shape() != want)
      throw std::runtime_error("transducer head: weight " + name + " is " + shape_of(t) + ", expected " +
                               shape_str(want));
    return t;
  }
  std::string alternatives;
  for (size_t i = 1; i < names.size(); ++i) alternatives += (i > 1 ? ", " : " (or ") + names[i];
  if (!alternatives.empty()) alternatives += ")";
  throw std::runtime_error("transducer head: missing weight " + names[0] + alternatives);
}

// Biases go to host::matmul as f32 whatever the checkpoint stores.
Tensor as_f32(const Tensor& t) { return Tensor::from_vector(t.shape(), t.to_vector()); }

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;  // first maximum wins, as torch.argmax
  return best;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// The prediction network's recurrent state and its last output projected by joint.pred.
struct PredState {
  std::vector<Tensor> h, c;  // per layer [1, pred_hidden]
  Tensor pred;               // [1, joint_hidden]
};

// One prediction-network step: `input` [1, pred_hidden] (the token's embedding, or zeros for the
// start symbol) through the LSTM stack, then joint.pred on the top layer's output.
void pred_step(const TransducerHead& head, Tensor input, PredState& s) {
  const int64_t H = head.config.pred_hidden;
  for (size_t l = 0; l < head.w_ih.size(); ++l) {
    Tensor gates = host::matmul(input, head.w_ih[l], &head.lstm_bias[l]);
    const Tensor recurrent = host::matmul(s.h[l], head.w_hh[l]);
    float* g = gates.data<float>();
    const float* r = recurrent.data<float>();
    float* h = s.h[l].data<float>();
    float* c = s.c[l].data<float>();
    for (int64_t j = 0; j < H; ++j) {
      const float i_gate = sigmoid(g[j] + r[j]);
      const float f_gate = sigmoid(g[H + j] + r[H + j]);
      const float g_gate = std::tanh(g[2 * H + j] + r[2 * H + j]);
      const float o_gate = sigmoid(g[3 * H + j] + r[3 * H + j]);
      c[j] = f_gate * c[j] + i_gate * g_gate;
      h[j] = o_gate * std::tanh(c[j]);
    }
    input = s.h[l];
  }
  s.pred = host::matmul(input, head.pred_w, &head.pred_b);
}

void check_config(const ConformerConfig& c) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("transducer head: " + what); };
  if (c.head != "rnnt" && c.head != "tdt")
    bad("config.head is \"" + c.head + "\"; greedy transducer decoding needs \"rnnt\" or \"tdt\"");
  if (c.vocab_size <= 0) bad("vocab_size " + std::to_string(c.vocab_size) + " must be > 0");
  if (c.d_model <= 0 || c.pred_hidden <= 0 || c.joint_hidden <= 0 || c.pred_layers <= 0)
    bad("d_model, pred_hidden, joint_hidden and pred_layers must be > 0");
  if (c.max_symbols_per_step <= 0)
    bad("max_symbols_per_step " + std::to_string(c.max_symbols_per_step) + " must be > 0");
  if (c.head == "tdt") {
    if (c.durations.empty()) bad("a TDT head needs durations (e.g. {0, 1, 2, 3, 4})");
    for (int64_t d : c.durations)
      if (d < 0) bad("TDT duration " + std::to_string(d) + " is negative");
  }
}

}  // namespace

TransducerHead load_transducer_head(const ConformerConfig& config, const WeightSource& w) {
  check_config(config);
  const int64_t V = config.vocab_size + 1, H = config.pred_hidden, J = config.joint_hidden;
  const int64_t outputs = V + (config.head == "tdt" ? static_cast<int64_t>(config.durations.size()) : 0);
  TransducerHead head;
  head.config = config;
  head.embed = pick(w, {"decoder.prediction.embed.weight", "head.decoder.embed.weight"}, {V, H});
  for (int64_t l = 0; l < config.pred_layers; ++l) {
    const std::string n = "_l" + std::to_string(l);
    auto lstm = [&](const std::string& what, const Shape& shape) {
      return pick(w, {"decoder.prediction.dec_rnn.lstm." + what + n, "head.decoder.lstm." + what + n}, shape);
    };
    head.w_ih.push_back(lstm("weight_ih", {4 * H, H}));
    head.w_hh.push_back(lstm("weight_hh", {4 * H, H}));
    std::vector<float> bias = lstm("bias_ih", {4 * H}).to_vector();
    const std::vector<float> bias_hh = lstm("bias_hh", {4 * H}).to_vector();
    for (int64_t j = 0; j < 4 * H; ++j) bias[j] += bias_hh[j];
    head.lstm_bias.push_back(Tensor::from_vector({4 * H}, bias));
  }
  head.enc_w = pick(w, {"joint.enc.weight", "head.joint.enc.weight"}, {J, config.d_model});
  head.enc_b = as_f32(pick(w, {"joint.enc.bias", "head.joint.enc.bias"}, {J}));
  head.pred_w = pick(w, {"joint.pred.weight", "head.joint.pred.weight"}, {J, H});
  head.pred_b = as_f32(pick(w, {"joint.pred.bias", "head.joint.pred.bias"}, {J}));
  // NeMo's joint_net is (activation, dropout, linear), or (activation, linear) when the model was
  // configured without joint dropout, as GigaAM's always is.
  head.out_w = pick(w, {"joint.joint_net.2.weight", "joint.joint_net.1.weight", "head.joint.joint_net.1.weight"},
                    {outputs, J});
  head.out_b = as_f32(
      pick(w, {"joint.joint_net.2.bias", "joint.joint_net.1.bias", "head.joint.joint_net.1.bias"}, {outputs}));
  return head;
}

std::vector<AsrToken> transducer_greedy(const TransducerHead& head, const Tensor& encoded) {
  const ConformerConfig& cfg = head.config;
  if (encoded.ndim() != 2 || encoded.dim(1) != cfg.d_model || encoded.dtype() != DType::F32)
    throw std::invalid_argument("transducer_greedy: encoder output is " + shape_of(encoded) + " " +
                                std::string(dtype_name(encoded.dtype())) + ", expected [frames, " +
                                std::to_string(cfg.d_model) + "] f32");
  const int64_t T = encoded.dim(0), V = cfg.vocab_size + 1, blank = cfg.vocab_size;
  const int64_t J = cfg.joint_hidden, H = cfg.pred_hidden;
  const bool tdt = cfg.head == "tdt";
  const int64_t outputs = head.out_w.dim(0);
  std::vector<AsrToken> tokens;
  if (T == 0) return tokens;

  const Tensor enc = host::matmul(encoded.contiguous(), head.enc_w, &head.enc_b);  // [T, J], once
  PredState state;
  for (int64_t l = 0; l < cfg.pred_layers; ++l) {
    state.h.push_back(Tensor::zeros({1, H}));
    state.c.push_back(Tensor::zeros({1, H}));
  }
  pred_step(head, Tensor::zeros({1, H}), state);  // start symbol: a zero embedding, as NeMo

  Tensor hidden = Tensor::empty({1, J});
  int64_t t = 0, run_frame = -1, run = 0;
  while (t < T) {
    const float* e = enc.data<float>() + t * J;
    const float* p = state.pred.data<float>();
    float* x = hidden.data<float>();
    for (int64_t j = 0; j < J; ++j) x[j] = std::max(e[j] + p[j], 0.0f);
    const Tensor logits = host::matmul(hidden, head.out_w, &head.out_b);
    const float* z = logits.data<float>();
    const int64_t k = argmax(z, V);
    int64_t duration = k == blank ? 1 : 0;  // RNN-T: a blank moves to the next frame
    if (tdt) duration = cfg.durations[argmax(z + V, outputs - V)];
    if (k == blank) {
      t += std::max<int64_t>(duration, 1);  // a blank always advances, whatever duration it predicts
      continue;
    }
    tokens.push_back({static_cast<int32_t>(k), t, tdt ? duration : 0});
    run = t == run_frame ? run + 1 : 1;
    run_frame = t;
    pred_step(head, Tensor::from_vector({1, H}, head.embed.row(k).to_vector()), state);
    t += duration;
    if (duration == 0 && run >= cfg.max_symbols_per_step) ++t;  // NeMo: force a blank after max symbols
  }
  return tokens;
}

std::vector<AsrToken> transducer_greedy(const ConformerConfig& config, const WeightSource& weights,
                                        const Tensor& encoded) {
  return transducer_greedy(load_transducer_head(config, weights), encoded);
}

std::vector<AsrToken> transducer_greedy(const ConformerModel& model, const Tensor& encoded) {
  return transducer_greedy(model.config(), model.weights(), encoded);
}

std::vector<AsrToken> ctc_greedy(const Tensor& log_probs, int64_t blank_id) {
  if (log_probs.ndim() != 2 || log_probs.dim(1) < 1)
    throw std::invalid_argument("ctc_greedy: log-probabilities are " + shape_of(log_probs) +
                                ", expected [frames, classes]");
  const int64_t T = log_probs.dim(0), C = log_probs.dim(1);
  if (blank_id < 0 || blank_id >= C)
    throw std::invalid_argument("ctc_greedy: blank id " + std::to_string(blank_id) + " is outside the " +
                                std::to_string(C) + " classes");
  const std::vector<float> v = log_probs.to_vector();
  std::vector<AsrToken> tokens;
  int64_t previous = -1;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t k = argmax(v.data() + t * C, C);
    if (k != blank_id && k != previous) tokens.push_back({static_cast<int32_t>(k), t, 0});
    previous = k;  // a blank between two equal labels keeps both
  }
  return tokens;
}

std::string detokenize(const std::vector<std::string>& vocabulary, const std::vector<AsrToken>& tokens) {
  static const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary
  std::string text;
  for (const AsrToken& tok : tokens) {
    if (tok.id < 0 || static_cast<size_t>(tok.id) >= vocabulary.size())
      throw std::invalid_argument("detokenize: token id " + std::to_string(tok.id) + " is outside the " +
                                  std::to_string(vocabulary.size()) + "-piece vocabulary");
    const std::string& piece = vocabulary[tok.id];
    if (piece == "<pad>" || piece == "<s>" || piece == "</s>" || piece == "<blank>") continue;  // control
    for (size_t i = 0; i < piece.size();) {
      if (piece.compare(i, kSpace.size(), kSpace) == 0) {
        text += ' ';
        i += kSpace.size();
      } else {
        text += piece[i++];
      }
    }
  }
  // SentencePiece drops the space its first piece's U+2581 stands for; a character vocabulary's own
  // " " tokens (GigaAM) are kept as its decoder keeps them.
  if (!tokens.empty() && !text.empty() && text[0] == ' ') {
    for (const AsrToken& tok : tokens) {
      const std::string& piece = vocabulary[tok.id];
      if (piece == "<pad>" || piece == "<s>" || piece == "</s>" || piece == "<blank>") continue;
      if (piece.compare(0, kSpace.size(), kSpace) == 0) text.erase(0, 1);
      break;
    }
  }
  return text;
}

std::string detokenize(const ConformerModel& model, const std::vector<AsrToken>& tokens) {
  return detokenize(model.vocabulary(), tokens);
}

}  // namespace xdna
