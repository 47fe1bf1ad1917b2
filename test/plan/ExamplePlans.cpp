//===- ExamplePlans.cpp - hand-built plans for tests and seed corpora ---===//

#include "test/plan/ExamplePlans.h"

#include <cstdlib>

namespace md::plan::examples {
namespace {

using fb::DType;
using fb::Group;
using fb::Opcode;

constexpr int64_t B = TinyMlpShape::kBatch, D = TinyMlpShape::kIn,
                  H = TinyMlpShape::kHidden, C = TinyMlpShape::kClasses,
                  N = TinyMlpShape::kUnitNumel;

/// A header and recipe every example shares.
void setCommon(PlanBuilder &b, const char *model, const char *plan,
               fb::ShardKind shard) {
  fb::HeaderT &h = b.header();
  h.model = model;
  h.plan_name = plan;
  h.preset = plan;
  h.source_file = "examples.mdl";
  h.source_hash = SourceHash(model);
  h.compiler_version = "md example plans";
  fb::PlanOptionsT &o = *h.options;
  o.shard = shard;
  o.wrap = fb::WrapKind::None;
  o.param_dtype = o.reduce_dtype = o.buffer_dtype = o.master_dtype = DType::F32;
  o.bucket_cap = 25 << 20;
  o.prefetch_forward = true;
  o.prefetch_backward = fb::PrefetchBackward::Pre;
  o.reshard_after_forward = shard == fb::ShardKind::Full;

  fb::RecipeT &r = b.recipe();
  r.global_batch = 16;
  r.micro_batch = 4;
  r.optimizer->kind = fb::OptimizerKind::AdamW;
  r.optimizer->lr = 1e-3;
  r.optimizer->beta1 = 0.9;
  r.optimizer->beta2 = 0.95;
  r.optimizer->eps = 1e-8;
  r.optimizer->weight_decay = 0.1;
  r.schedule->kind = fb::ScheduleKind::Cosine;
  r.schedule->warmup = 10;
  r.schedule->steps = 100;
  r.clip_grad_norm = 1.0;
  r.seed = 1337;
  r.sampler->seed = 1337;
  r.sampler->reshuffle_each_epoch = true;
  r.sampler->tail = fb::TailPolicy::Drop;
}

class TinyMlp {
public:
  explicit TinyMlp(const TinyMlpOptions &options) {
    setCommon(b_, "tiny_mlp", "fsdp-full", fb::ShardKind::Full);
    b_.header().world_size = options.pinnedWorldSize;
    b_.recipe().global_batch = options.globalBatch;
    b_.recipe().micro_batch = options.microBatch;
    train_ = b_.addDataset(fb::DataKind::Synthetic, "", 7);
    val_ = b_.addDataset(fb::DataKind::Npy, "data/val.npy");
    b_.recipe().train_data = train_;

    int32_t unit = b_.addUnit("", N);
    b_.addParam("fc1.weight", {H, D}, DType::F32, unit, 0, fb::InitKind::Normal,
                {0.0, 0.02});
    b_.addParam("fc1.bias", {H}, DType::F32, unit, H * D);
    b_.addParam("fc2.weight", {C, H}, DType::F32, unit, H * D + H,
                fb::InitKind::Normal, {0.0, 0.02});
    b_.addParam("fc2.bias", {C}, DType::F32, unit, H * D + H + C * H);

    master_ = b_.addBuffer(PlanBuilder::state(
        PlanBuilder::shard("master", DType::F32, N, Group::World),
        fb::StateRole::Master, unit));
    expAvg_ = b_.addBuffer(PlanBuilder::state(
        PlanBuilder::shard("exp_avg", DType::F32, N, Group::World),
        fb::StateRole::ExpAvg, unit));
    expAvgSq_ = b_.addBuffer(PlanBuilder::state(
        PlanBuilder::shard("exp_avg_sq", DType::F32, N, Group::World),
        fb::StateRole::ExpAvgSq, unit));
    gradAcc_ = b_.addBuffer(
        PlanBuilder::state(PlanBuilder::full("grad_acc", DType::F32, {N}),
                           fb::StateRole::GradAcc, unit, true));
    gathered_ = b_.addEvent("params gathered");
    reduced_ = b_.addEvent("grads reduced");
    loaded_ = b_.addEvent("shard loaded");
    summed_ = b_.addEvent("grads summed");
    loc_ = b_.addLocation("examples.mdl", 12, 5);

    int32_t step = b_.addBlock(fb::BlockKind::Step);
    int32_t micro = b_.addBlock(fb::BlockKind::MicroSteps);
    b_.setStepBlock(step);
    b_.add(step, Opcode::MicroSteps).blocks = {micro};
    int32_t g = backward(micro, forward(micro, gather(micro), train_));
    b_.add(micro, Opcode::GradAccumulate, {g}, {gradAcc_});
    optimizerStep(step, backward(step, forward(step, gather(step), train_)));
    hooks();
  }

  PlanBuilder take() {
    if (!b_.inferLiveness().ok())
      std::abort(); // the example is wrong, not the input
    return std::move(b_);
  }

private:
  struct Params {
    int32_t w1, b1, w2, b2;
  };
  struct Forward {
    Params p;
    int32_t x, y, h, r, logits, loss;
  };

  int32_t full(const char *name, std::vector<int64_t> shape,
               DType dtype = DType::F32) {
    return b_.addBuffer(PlanBuilder::full(name, dtype, std::move(shape)));
  }
  int32_t view(int32_t block, int32_t flat, int64_t offset,
               std::vector<int64_t> shape) {
    int32_t v = full("view", std::move(shape));
    b_.add(block, Opcode::View, {flat}, {v}).ints = {offset};
    return v;
  }

  /// state_load of the master shard, all_gather on the comm stream, views.
  Params gather(int32_t block) {
    int32_t shard = b_.addBuffer(
        PlanBuilder::shard("master.shard", DType::F32, N, Group::World));
    b_.add(block, Opcode::StateLoad, {master_}, {shard}).record = loaded_;
    int32_t flat = full("params.flat", {N});
    fb::InstructionT &ag = b_.add(block, Opcode::AllGather, {shard}, {flat});
    ag.ints = {static_cast<int64_t>(Group::World), 0, 0};
    ag.stream = 1;
    ag.waits = {loaded_};
    ag.record = gathered_;
    Params p;
    p.w1 = view(block, flat, 0, {H, D});
    b_.plan().blocks[block]->instructions.back()->waits = {
        gathered_}; // first use of the gather
    p.b1 = view(block, flat, H * D, {H});
    p.w2 = view(block, flat, H * D + H, {C, H});
    p.b2 = view(block, flat, H * D + H + C * H, {C});
    return p;
  }

  Forward forward(int32_t block, Params p, int32_t dataset) {
    Forward f;
    f.p = p;
    f.x = full("x", {B, D});
    f.y = full("y", {B}, DType::I32);
    b_.add(block, Opcode::Batch, {}, {f.x, f.y}).ints = {dataset};
    f.h = full("h", {B, H});
    fb::InstructionT &mm =
        b_.add(block, Opcode::Matmul, {f.x, p.w1, p.b1}, {f.h});
    mm.ints = {0, 1};
    mm.loc = loc_;
    f.r = full("r", {B, H});
    b_.add(block, Opcode::Relu, {f.h}, {f.r});
    f.logits = full("logits", {B, C});
    b_.add(block, Opcode::Matmul, {f.r, p.w2, p.b2}, {f.logits}).ints = {0, 1};
    f.loss = full("loss", {});
    b_.add(block, Opcode::CrossEntropy, {f.logits, f.y}, {f.loss});
    return f;
  }

  /// Backward from the loss; returns the flat gradient of the unit.
  int32_t backward(int32_t block, const Forward &f) {
    b_.add(block, Opcode::RecordLoss, {f.loss});
    int32_t scale = full("accum_scale", {});
    b_.add(block, Opcode::AccumScale, {}, {scale});
    int32_t dl = full("dlogits", {B, C});
    b_.add(block, Opcode::CrossEntropyGrad, {scale, f.logits, f.y}, {dl});
    int32_t dr = full("dr", {B, H}), dw2 = full("dw2", {C, H}),
            db2 = full("db2", {C});
    b_.add(block, Opcode::MatmulGrad, {dl, f.r, f.p.w2}, {dr, dw2, db2})
        .ints = {0, 1};
    int32_t dh = full("dh", {B, H});
    b_.add(block, Opcode::ReluGrad, {dr, f.h}, {dh});
    int32_t dx = full("dx", {B, D}), dw1 = full("dw1", {H, D}),
            db1 = full("db1", {H});
    b_.add(block, Opcode::MatmulGrad, {dh, f.x, f.p.w1}, {dx, dw1, db1})
        .ints = {0, 1};
    int32_t g = full("grad.flat", {N});
    b_.add(block, Opcode::Flatten, {dw1, db1, dw2, db2}, {g});
    return g;
  }

  int32_t scalar(const char *name, DType dtype = DType::F32) {
    return full(name, {}, dtype);
  }

  void optimizerStep(int32_t step, int32_t g) {
    int32_t total = full("grad.total", {N});
    b_.add(step, Opcode::GradTotal, {g, gradAcc_}, {total}).record = summed_;
    int32_t shard = b_.addBuffer(
        PlanBuilder::shard("grad.shard", DType::F32, N, Group::World));
    fb::InstructionT &rs =
        b_.add(step, Opcode::ReduceScatter, {total}, {shard});
    rs.ints = {static_cast<int64_t>(Group::World),
               static_cast<int64_t>(fb::Reduction::Avg), 1, 0};
    rs.stream = 1;
    rs.waits = {summed_};
    rs.record = reduced_;
    int32_t sq = scalar("norm.sq");
    fb::InstructionT &gn = b_.add(step, Opcode::GlobalNorm, {shard}, {sq});
    gn.ints = {1};
    gn.waits = {reduced_};
    int32_t sqSum = scalar("norm.sq.sum");
    b_.add(step, Opcode::AllReduce, {sq}, {sqSum}).ints = {
        static_cast<int64_t>(Group::World),
        static_cast<int64_t>(fb::Reduction::Sum), 2};
    int32_t norm = scalar("norm");
    b_.add(step, Opcode::Sqrt, {sqSum}, {norm});
    int32_t clipped = b_.addBuffer(
        PlanBuilder::shard("grad.clipped", DType::F32, N, Group::World));
    b_.add(step, Opcode::Clip, {shard, norm}, {clipped}).floats = {1.0};
    auto load = [&](int32_t state, const char *name) {
      int32_t v =
          b_.addBuffer(PlanBuilder::shard(name, DType::F32, N, Group::World));
      b_.add(step, Opcode::StateLoad, {state}, {v});
      return v;
    };
    int32_t p = load(master_, "p"), m = load(expAvg_, "m"),
            v = load(expAvgSq_, "v");
    // md.step counts completed steps from 0; the optimizer's step is 1-based.
    int32_t st = scalar("step", DType::I64);
    b_.add(step, Opcode::Step, {}, {st});
    int32_t one = scalar("one", DType::I64);
    b_.add(step, Opcode::Constant, {}, {one}).ints = {1};
    int32_t next = scalar("step.next", DType::I64);
    b_.add(step, Opcode::ScalarArith, {st, one}, {next}).ints = {
        static_cast<int64_t>(fb::ArithKind::Add)};
    int32_t lr = scalar("lr");
    b_.add(step, Opcode::Lr, {st}, {lr});
    int32_t p2 =
        b_.addBuffer(PlanBuilder::shard("p2", DType::F32, N, Group::World));
    int32_t m2 =
        b_.addBuffer(PlanBuilder::shard("m2", DType::F32, N, Group::World));
    int32_t v2 =
        b_.addBuffer(PlanBuilder::shard("v2", DType::F32, N, Group::World));
    b_.add(step, Opcode::AdamWUpdate, {p, clipped, m, v, lr, next},
           {p2, m2, v2})
        .floats = {0.9, 0.95, 1e-8, 0.1};
    b_.add(step, Opcode::StateStore, {p2}, {master_});
    b_.add(step, Opcode::StateStore, {m2}, {expAvg_});
    b_.add(step, Opcode::StateStore, {v2}, {expAvgSq_});
  }

  void hooks() {
    int32_t hooks = b_.addBlock(fb::BlockKind::Hooks);
    b_.setHooksBlock(hooks);

    // every 10 steps { train_loss = mean(loss); log; if train_loss > 10 {
    // print; stop } }
    int32_t every10 = b_.addBlock(fb::BlockKind::Every);
    fb::InstructionT &e10 = b_.add(hooks, Opcode::Every);
    e10.ints = {10, static_cast<int64_t>(fb::PeriodUnit::Steps)};
    e10.blocks = {every10};
    int32_t loss = scalar("loss");
    b_.add(every10, Opcode::Loss, {}, {loss});
    int32_t mean = scalar("train_loss");
    b_.add(every10, Opcode::AllReduce, {loss}, {mean}).ints = {
        static_cast<int64_t>(Group::World),
        static_cast<int64_t>(fb::Reduction::Avg), -1};
    fb::InstructionT &log = b_.add(every10, Opcode::Log, {mean});
    log.strings = {"train"};
    log.rank0_only = true;
    int32_t limit = scalar("limit");
    b_.add(every10, Opcode::Constant, {}, {limit}).floats = {10.0};
    int32_t diverged = scalar("diverged", DType::Bool);
    b_.add(every10, Opcode::ScalarCompare, {mean, limit}, {diverged}).ints = {
        static_cast<int64_t>(fb::CompareKind::Gt)};
    int32_t then = b_.addBlock(fb::BlockKind::Then);
    b_.add(every10, Opcode::If, {diverged}).blocks = {then};
    b_.add(then, Opcode::Print, {mean}).strings = {"loss diverged"};
    b_.add(then, Opcode::Exit).strings = {"loss diverged"};

    // every 50 steps { val = evaluate(npy("data/val.npy")); log("val", val) }
    int32_t every50 = b_.addBlock(fb::BlockKind::Every);
    fb::InstructionT &e50 = b_.add(hooks, Opcode::Every);
    e50.ints = {50, static_cast<int64_t>(fb::PeriodUnit::Steps)};
    e50.blocks = {every50};
    int32_t body = b_.addBlock(fb::BlockKind::EvalBody);
    Forward f = forward(body, gather(body), val_);
    b_.add(body, Opcode::Yield, {f.loss});
    int32_t val = scalar("val");
    fb::InstructionT &eval = b_.add(every50, Opcode::Evaluate, {}, {val});
    eval.ints = {val_, 2};
    eval.blocks = {body};
    b_.add(every50, Opcode::Log, {val}).strings = {"val", "loss"};

    // every 100 steps { save checkpoint(sharded, "ckpt/tiny") }
    int32_t every100 = b_.addBlock(fb::BlockKind::Every);
    fb::InstructionT &e100 = b_.add(hooks, Opcode::Every);
    e100.ints = {100, static_cast<int64_t>(fb::PeriodUnit::Steps)};
    e100.blocks = {every100};
    fb::InstructionT &save = b_.add(every100, Opcode::Save);
    save.ints = {static_cast<int64_t>(fb::CheckpointFormat::Sharded)};
    save.strings = {"ckpt/tiny"};
  }

  PlanBuilder b_;
  int32_t train_ = -1, val_ = -1;
  int32_t master_ = -1, expAvg_ = -1, expAvgSq_ = -1, gradAcc_ = -1;
  int32_t loaded_ = -1, gathered_ = -1, summed_ = -1, reduced_ = -1, loc_ = -1;
};

} // namespace

PlanBuilder TinyMlpPlan(const TinyMlpOptions &options) {
  return TinyMlp(options).take();
}

PlanBuilder MinimalPlan() {
  PlanBuilder b;
  setCommon(b, "minimal", "single", fb::ShardKind::None);
  b.header().world_size = 1;
  b.recipe().train_data = b.addDataset(fb::DataKind::Synthetic, "");
  int32_t step = b.addBlock(fb::BlockKind::Step);
  b.setStepBlock(step);
  int32_t x = b.addBuffer(PlanBuilder::full("x", DType::F32, {4, 2}));
  b.add(step, Opcode::Batch, {}, {x}).ints = {b.recipe().train_data};
  if (!b.inferLiveness().ok())
    std::abort();
  return b;
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> ExamplePlanFiles() {
  TinyMlpOptions pinned;
  pinned.pinnedWorldSize = 2;
  TinyMlpOptions noAccumulation;
  noAccumulation.globalBatch = 8;
  return {{"tiny-mlp", TinyMlpPlan().finish()},
          {"tiny-mlp-pinned-2", TinyMlpPlan(pinned).finish()},
          {"tiny-mlp-batch-8", TinyMlpPlan(noAccumulation).finish()},
          {"minimal", MinimalPlan().finish()}};
}

} // namespace md::plan::examples
