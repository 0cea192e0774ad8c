// train_eval.cpp - evaluation on the validation split (see train_eval.h).
#include "models/train_eval.h"

#include <cstdio>
#include <vector>

#include "models/gpt.h"
#include "runtime/autograd/engine.h"
#include "runtime/distributed/host_collectives.h"
#include "runtime/ops/accuracy.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/tensor/device_checks.h"

namespace ddp::models {

EvalResult evaluate(const TrainOptions& o, TrainSetup& s, dist::ProcessGroup& pg, int64_t step, bool talk) {
  autograd::NoGradGuard ng;
  // rank 0's buffers (BatchNorm statistics) for everyone; --zero 2/3: the caller holds the gathered scope, and
  // the buffers are those of the last training forward (which broadcast them)
  if (s.ddp) s.ddp->before_forward();
  s.model->eval();
  s.val_loader->start_epoch(0);
  double rows = 0;
  // float64 on the model's device, read once after the loop (no host read per batch)
  Tensor loss_sum, correct_sum;
  ops::CrossEntropyOptions sum_rows;
  sum_rows.reduction = ops::LossReduction::Sum;
  if (auto* gpt = dynamic_cast<GPT*>(s.model.get())) sum_rows.classes = gpt->loss_classes();  // padded vocab
  int64_t batches = 0;
  while (auto b = s.val_loader->next()) {
    if (o.eval_batches > 0 && batches >= o.eval_batches) break;
    Tensor x = b->x;
    if (!s.data.tokens && x.dtype() != s.dtype) x = x.to(s.dtype);  // as in training (--dtype float64)
    Tensor out = s.model->forward(x);
    Tensor l = ops::cross_entropy(out, b->y, sum_rows).to(DType::F64);  // the double item() gave, as before
    loss_sum = loss_sum.defined() ? loss_sum + l : l;
    rows += static_cast<double>(b->y.numel());
    if (!s.data.tokens) {  // rows whose largest logit is their label, counted on the device
      Tensor hits = ops::argmax_hits(out, b->y);
      correct_sum = correct_sum.defined() ? correct_sum + hits : hits;
    }
    ++batches;
  }
  s.model->train();
  const double loss_total = loss_sum.defined() ? loss_sum.item() : 0.0;  // raises the device-side index checks
  const double correct = correct_sum.defined() ? correct_sum.item() : 0.0;
  check_device_errors();
  Tensor t = Tensor::from_data<double>({loss_total, rows, correct}, {3});
  host_allreduce(pg, t);
  const double* v = t.data<double>();
  EvalResult r;
  r.loss = v[1] > 0 ? v[0] / v[1] : NAN;
  r.accuracy = s.data.tokens ? -1 : (v[1] > 0 ? v[2] / v[1] : 0);
  if (talk && v[1] == 0) {
    // NaN below; say why rather than print "nan over 0 tokens"
    std::printf("eval step %lld: no validation rows: the validation split does not fill one batch of the loader "
                "(%s); no val loss (use more data or a smaller batch)\n",
                static_cast<long long>(step),
                o.deterministic ? "--deterministic: a step of --micro-batches x --batch-size rows over all ranks"
                                : "--batch-size rows per rank");
    std::fflush(stdout);
  } else if (talk) {
    if (s.data.tokens)
      std::printf("eval step %lld: val loss %.4f nats/char over %.0f tokens\n", static_cast<long long>(step),
                  r.loss, v[1]);
    else
      std::printf("eval step %lld: val loss %.4f, accuracy %.2f%% over %.0f samples\n",
                  static_cast<long long>(step), r.loss, 100 * r.accuracy, v[1]);
    std::fflush(stdout);
  }
  return r;
}

}  // namespace ddp::models
