#include "decode/decode_loop.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <span>

#include "core/error.h"
#include "decode/sampler.h"
#include "decode/text_stream.h"
#include "model/qwen35_model.h"

namespace deltatune {

namespace {

SeqLayout make_layout(Backend& be, std::vector<int32_t> cu, const std::vector<int32_t>& positions) {
  SeqLayout s;
  s.cu_seqlens = be.upload_i32(cu);
  s.positions = be.upload_i32(positions);
  for (size_t i = 1; i < cu.size(); ++i) s.max_seqlen = std::max(s.max_seqlen, cu[i] - cu[i - 1]);
  s.host_cu_seqlens = std::move(cu);
  return s;
}

struct Live {
  DecodeSequence* seq;
  TokenSampler sampler;
  TextStream text;
  bool done = false;
  int32_t last = 0;   // the token to feed next
  int32_t pos = 0;    // its position
};

}  // namespace

void run_decode(const DecodeContext& ctx, const std::vector<DecodeSequence*>& seqs, const GenerateCallback& on_event,
                const std::atomic<bool>* cancel) {
  Qwen35Model& model = ctx.model;
  Backend& be = model.backend();
  const int64_t N = static_cast<int64_t>(seqs.size()), V = model.config().vocab_size;
  int64_t capacity = 0;
  std::vector<Live> live;
  live.reserve(seqs.size());
  for (DecodeSequence* s : seqs) {
    capacity = std::max<int64_t>(capacity, static_cast<int64_t>(s->prompt.size()) + s->sampling.max_new_tokens);
    live.push_back(Live{s, TokenSampler(s->sampling, s->prompt), TextStream(ctx.tok, s->sampling.stop)});
    s->result = GenerateResult{};
    s->result.prompt_tokens = static_cast<int64_t>(s->prompt.size());
  }
  InferenceCache cache = model.new_inference_cache(N, capacity);

  auto finish = [&](Live& l, const char* reason, std::string delta, int32_t token) {
    l.done = true;
    l.seq->result.finish_reason = reason;
    l.seq->result.text = l.text.text();
    if (on_event) on_event(GenerateEvent{l.seq->request, token, std::move(delta), true, reason});
  };
  // Samples each running sequence's next token from its logits row and reports it.
  auto take = [&](const Tensor& logits_host) {
    float* rows = logits_host.ptr<float>();
    std::vector<int32_t> next(static_cast<size_t>(N), -1);
    for (int64_t n = 0; n < N; ++n)
      if (!live[static_cast<size_t>(n)].done)
        next[static_cast<size_t>(n)] =
            live[static_cast<size_t>(n)].sampler.pick(std::span<float>(rows + n * V, static_cast<size_t>(V)));
    if (ctx.agree_tokens) ctx.agree_tokens(next);
    for (int64_t n = 0; n < N; ++n) {
      Live& l = live[static_cast<size_t>(n)];
      if (l.done) continue;
      const int32_t t = next[static_cast<size_t>(n)];
      l.sampler.remember(t);
      GenerateResult& r = l.seq->result;
      r.token_ids.push_back(t);
      l.last = t;
      if (!l.seq->sampling.ignore_eos && ctx.end_ids.count(t)) {
        finish(l, "stop", l.text.finish(), t);
        continue;
      }
      bool stopped = false;
      std::string delta = l.text.push(t, stopped);
      if (stopped) {
        finish(l, "stop", std::move(delta), t);
      } else if (static_cast<int64_t>(r.token_ids.size()) >= l.seq->sampling.max_new_tokens) {
        finish(l, "length", delta + l.text.finish(), t);
      } else if (on_event) {
        on_event(GenerateEvent{l.seq->request, t, std::move(delta), false, ""});
      }
    }
  };

  // Prefill: every prompt packed, logits of each prompt's last token.
  {
    std::vector<int32_t> cu{0}, ids, positions, rows;
    for (const Live& l : live) {
      const auto& p = l.seq->prompt;
      ids.insert(ids.end(), p.begin(), p.end());
      for (size_t i = 0; i < p.size(); ++i) positions.push_back(static_cast<int32_t>(i));
      cu.push_back(cu.back() + static_cast<int32_t>(p.size()));
      rows.push_back(cu.back() - 1);
    }
    const SeqLayout seq = make_layout(be, cu, positions);
    const Tensor rows_dev = be.upload_i32(rows);
    const Tensor h = model.forward_cached(be.upload_i32(ids), seq, cache, ctx.lora, true, &rows_dev);
    Tensor logits = be.alloc({N, V}, be.compute_dtype());
    model.lm_logits(h, logits);
    take(be.download(logits, DType::F32));
    for (Live& l : live) l.pos = static_cast<int32_t>(l.seq->prompt.size());
  }

  // Decode: one token per sequence per step, on fixed device buffers (ids, positions, logits) so that the step
  // can be recorded once and replayed.
  std::vector<int32_t> cu(static_cast<size_t>(N + 1));
  std::iota(cu.begin(), cu.end(), 0);
  SeqLayout seq;
  seq.host_cu_seqlens = cu;
  seq.cu_seqlens = be.upload_i32(cu);
  seq.positions = be.alloc({N}, DType::I32);
  seq.max_seqlen = 1;
  Tensor ids = be.alloc({N}, DType::I32);
  Tensor logits = be.alloc({N, V}, be.compute_dtype());
  auto step = [&] { model.lm_logits(model.forward_cached(ids, seq, cache, ctx.lora, false, nullptr), logits); };
  std::unique_ptr<Backend::Recording> recording;
  bool record = ctx.record_step && model.decode_step_recordable();
  while (std::any_of(live.begin(), live.end(), [](const Live& l) { return !l.done; })) {
    if (cancel && cancel->load()) {
      for (Live& l : live)
        if (!l.done) finish(l, "cancelled", l.text.finish(), -1);
      break;
    }
    std::vector<int32_t> step_ids, positions;
    for (const Live& l : live) {
      step_ids.push_back(l.last);
      positions.push_back(std::min<int32_t>(l.pos, static_cast<int32_t>(capacity - 1)));
    }
    be.write_i32(ids, step_ids);
    be.write_i32(seq.positions, positions);
    if (record && !recording && be.begin_capture()) {
      bool complete = true;
      try {
        step();
      } catch (const Error&) {
        complete = false;  // nothing ran while recording: the step is run op by op below
      }
      recording = be.end_capture();
      if (!complete) recording.reset();
      record = recording != nullptr;
    }
    if (recording) be.replay(*recording);
    else step();
    take(be.download(logits, DType::F32));
    for (Live& l : live)
      if (!l.done) ++l.pos;
  }
}

}  // namespace deltatune
