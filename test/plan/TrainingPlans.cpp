//===- TrainingPlans.cpp - plans that train, for the executor's tests ----===//

#include "test/plan/TrainingPlans.h"

#include <cmath>
#include <cstdlib>

namespace md::plan::examples {
namespace {

using fb::DType;
using fb::Group;
using fb::Opcode;

class Builder {
public:
  explicit Builder(const TrainingPlanOptions &o) : o_(o) {
    header();
    recipe();
    params();
    state();
    int32_t step = b_.addBlock(fb::BlockKind::Step);
    int32_t micro = b_.addBlock(fb::BlockKind::MicroSteps);
    b_.setStepBlock(step);
    b_.add(step, Opcode::MicroSteps).blocks = {micro};
    int32_t g = forwardBackward(micro, train_);
    b_.add(micro, Opcode::GradAccumulate, {g}, {acc_});
    optimizerStep(step, forwardBackward(step, train_));
    hooks();
  }

  PlanBuilder take() {
    if (!b_.inferLiveness().ok())
      std::abort(); // the builder is wrong, not the input
    return std::move(b_);
  }

private:
  bool mixed() const { return o_.paramDtype != DType::F32; }
  bool shardedMaster() const {
    return o_.preset == Preset::Zero1 || o_.preset == Preset::FsdpGradOp ||
           o_.preset == Preset::FsdpFull || o_.preset == Preset::Hybrid;
  }
  /// fsdp-full and hybrid gather the parameters before each use.
  bool gathers() const {
    return o_.preset == Preset::FsdpFull || o_.preset == Preset::Hybrid;
  }
  /// The group the sharded state is split over.
  Group stateGroup() const {
    return o_.preset == Preset::Hybrid ? Group::Shard : Group::World;
  }
  DType p() const { return o_.paramDtype; }

  int32_t full(const char *name, std::vector<int64_t> shape,
               DType dtype = DType::F32) {
    return b_.addBuffer(PlanBuilder::full(name, dtype, std::move(shape)));
  }
  int32_t shard(const char *name, DType dtype = DType::F32) {
    return b_.addBuffer(PlanBuilder::shard(name, dtype, n_, stateGroup()));
  }
  int32_t scalar(const char *name, DType dtype = DType::F32) {
    return full(name, {}, dtype);
  }
  int32_t view(int32_t block, int32_t flat, int64_t offset,
               std::vector<int64_t> shape) {
    int32_t v = full("view", std::move(shape), b_.plan().buffers[flat]->dtype);
    b_.add(block, Opcode::View, {flat}, {v}).ints = {offset};
    return v;
  }

  void header() {
    fb::HeaderT &h = b_.header();
    h.model = o_.model == Model::Mlp ? "mlp" : "bigram";
    h.plan_name = PresetName(o_.preset);
    h.preset = h.plan_name;
    h.source_file = "training-plans.mdl";
    h.source_hash = SourceHash(h.model);
    h.compiler_version = "md test plans";
    h.world_size = o_.preset == Preset::Single ? 1 : o_.pinnedWorldSize;
    fb::PlanOptionsT &opt = *h.options;
    switch (o_.preset) {
    case Preset::Single:
    case Preset::Ddp:
      opt.shard = fb::ShardKind::None;
      break;
    case Preset::Zero1:
      opt.shard = fb::ShardKind::Optimizer;
      break;
    case Preset::FsdpGradOp:
      opt.shard = fb::ShardKind::GradOp;
      break;
    case Preset::FsdpFull:
      opt.shard = fb::ShardKind::Full;
      break;
    case Preset::Hybrid:
      opt.shard = fb::ShardKind::Hybrid;
      h.shard_group_size = o_.shardGroupSize;
      break;
    }
    opt.wrap = fb::WrapKind::None;
    opt.param_dtype = p();
    opt.reduce_dtype = opt.buffer_dtype = opt.master_dtype = DType::F32;
    opt.bucket_cap = 25 << 20;
    opt.prefetch_forward = true;
    opt.prefetch_backward = fb::PrefetchBackward::Pre;
    opt.reshard_after_forward = gathers();
  }

  void recipe() {
    fb::RecipeT &r = b_.recipe();
    r.global_batch = o_.globalBatch;
    r.micro_batch = o_.microBatch;
    r.optimizer->kind =
        o_.adamw ? fb::OptimizerKind::AdamW : fb::OptimizerKind::Sgd;
    r.optimizer->lr = o_.lr;
    r.optimizer->beta1 = 0.9;
    r.optimizer->beta2 = 0.95;
    r.optimizer->eps = 1e-8;
    r.optimizer->weight_decay = o_.weightDecay;
    r.optimizer->momentum = o_.adamw ? 0.0 : 0.9;
    r.schedule->kind = o_.schedule;
    r.schedule->warmup = o_.warmup;
    r.schedule->steps = o_.steps;
    r.schedule->min_lr = o_.minLr;
    r.clip_grad_norm = o_.clip;
    r.seed = o_.seed;
    r.sampler->seed = o_.seed;
    r.sampler->reshuffle_each_epoch = true;
    r.sampler->tail = o_.tail;
    train_ = b_.addDataset(o_.data, o_.dataPath, o_.dataSeed);
    r.train_data = train_;
    if (o_.evalEvery > 0)
      val_ = b_.addDataset(fb::DataKind::Synthetic, "", o_.dataSeed + 1);
  }

  void params() {
    if (o_.model == Model::Mlp) {
      const int64_t D = o_.in, H = o_.hidden, C = o_.classes;
      n_ = H * D + H + C * H + C;
      unit_ = b_.addUnit("", n_);
      // normal(0, 1 / sqrt(fan_in)): unit-scale activations at any width.
      b_.addParam("fc1.weight", {H, D}, DType::F32, unit_, 0,
                  fb::InitKind::Normal, {0.0, 1.0 / std::sqrt(double(D))});
      b_.addParam("fc1.bias", {H}, DType::F32, unit_, H * D);
      b_.addParam("fc2.weight", {C, H}, DType::F32, unit_, H * D + H,
                  fb::InitKind::Normal, {0.0, 1.0 / std::sqrt(double(H))});
      b_.addParam("fc2.bias", {C}, DType::F32, unit_, H * D + H + C * H);
    } else {
      const int64_t V = o_.classes;
      n_ = V * V;
      unit_ = b_.addUnit("", n_);
      b_.addParam("wte.weight", {V, V}, DType::F32, unit_, 0,
                  fb::InitKind::Normal, {0.0, 0.02});
    }
  }

  void state() {
    using fb::StateRole;
    auto master = [&](const char *name) {
      return shardedMaster()
                 ? PlanBuilder::shard(name, DType::F32, n_, stateGroup())
                 : PlanBuilder::full(name, DType::F32, {n_});
    };
    master_ = b_.addBuffer(
        PlanBuilder::state(master("u0.master"), StateRole::Master, unit_));
    if (o_.preset == Preset::Zero1 || o_.preset == Preset::FsdpGradOp)
      params_ = b_.addBuffer(PlanBuilder::state(
          PlanBuilder::full("u0.params", p(), {n_}), StateRole::Params, unit_));
    else if (mixed())
      params_ = b_.addBuffer(PlanBuilder::state(
          gathers() ? PlanBuilder::shard("u0.params", p(), n_, stateGroup())
                    : PlanBuilder::full("u0.params", p(), {n_}),
          StateRole::Params, unit_));
    if (o_.adamw) {
      m_ = b_.addBuffer(
          PlanBuilder::state(master("u0.exp_avg"), StateRole::ExpAvg, unit_));
      v_ = b_.addBuffer(PlanBuilder::state(master("u0.exp_avg_sq"),
                                           StateRole::ExpAvgSq, unit_));
    } else {
      m_ = b_.addBuffer(PlanBuilder::state(master("u0.momentum"),
                                           StateRole::Momentum, unit_));
    }
    acc_ = b_.addBuffer(
        PlanBuilder::state(PlanBuilder::full("u0.grad_acc", DType::F32, {n_}),
                           StateRole::GradAcc, unit_, true));
  }

  /// The flat parameters the forward reads: a state, or an all-gather of
  /// one (fsdp-full).
  int32_t flatParams(int32_t block, const char *phase) {
    (void)phase;
    int32_t source = params_ >= 0 ? params_ : master_;
    DType t = params_ >= 0 ? p() : DType::F32;
    if (gathers()) {
      int32_t s = shard("params.shard", t);
      b_.add(block, Opcode::StateLoad, {source}, {s});
      int32_t flat = full("params.gathered", {n_}, t);
      b_.add(block, Opcode::AllGather, {s}, {flat}).ints = {
          static_cast<int64_t>(stateGroup()), 0, 0};
      return flat;
    }
    int32_t flat = full("params.flat", {n_}, t);
    b_.add(block, Opcode::StateLoad, {source}, {flat});
    return flat;
  }

  /// Forward and backward of one micro-batch; returns the flat gradient in
  /// the param dtype.
  int32_t forwardBackward(int32_t block, int32_t dataset) {
    return o_.model == Model::Mlp ? mlp(block, dataset, true)
                                  : bigram(block, dataset, true);
  }

  int32_t mlp(int32_t block, int32_t dataset, bool backward) {
    const int64_t B = o_.microBatch, D = o_.in, H = o_.hidden, C = o_.classes;
    int32_t x = full("x", {B, D}), y = full("y", {B}, DType::I32);
    b_.add(block, Opcode::Batch, {}, {x, y}).ints = {dataset};
    int32_t xp = x;
    if (mixed()) {
      xp = full("x.cast", {B, D}, p());
      b_.add(block, Opcode::Cast, {x}, {xp});
    }
    int32_t scale = -1;
    if (backward) {
      scale = scalar("accum_scale");
      b_.add(block, Opcode::AccumScale, {}, {scale});
    }
    int32_t flat = flatParams(block, "forward");
    int32_t w1 = view(block, flat, 0, {H, D});
    int32_t b1 = view(block, flat, H * D, {H});
    int32_t h = full("h", {B, H}, p());
    b_.add(block, Opcode::Matmul, {xp, w1, b1}, {h}).ints = {0, 1};
    int32_t r = full("r", {B, H}, p());
    b_.add(block, Opcode::Relu, {h}, {r});
    int32_t w2 = view(block, flat, H * D + H, {C, H});
    int32_t b2 = view(block, flat, H * D + H + C * H, {C});
    int32_t logits = full("logits", {B, C}, p());
    b_.add(block, Opcode::Matmul, {r, w2, b2}, {logits}).ints = {0, 1};
    int32_t loss = scalar("loss");
    b_.add(block, Opcode::CrossEntropy, {logits, y}, {loss});
    if (!backward)
      return loss;
    b_.add(block, Opcode::RecordLoss, {loss});
    int32_t dl = full("dlogits", {B, C}, p());
    b_.add(block, Opcode::CrossEntropyGrad, {scale, logits, y}, {dl});
    int32_t gathered = flat;
    if (gathers()) { // reshard_after_forward
      gathered = flatParams(block, "backward");
      w2 = view(block, gathered, H * D + H, {C, H});
    }
    int32_t dr = full("dr", {B, H}, p()), dw2 = full("dw2", {C, H}, p()),
            db2 = full("db2", {C}, p());
    b_.add(block, Opcode::MatmulGrad, {dl, r, w2}, {dr, dw2, db2}).ints = {0,
                                                                           1};
    int32_t dh = full("dh", {B, H}, p());
    b_.add(block, Opcode::ReluGrad, {dr, h}, {dh});
    if (gathers())
      w1 = view(block, gathered, 0, {H, D});
    int32_t dx = full("dx", {B, D}, p()), dw1 = full("dw1", {H, D}, p()),
            db1 = full("db1", {H}, p());
    b_.add(block, Opcode::MatmulGrad, {dh, xp, w1}, {dx, dw1, db1}).ints = {0,
                                                                            1};
    int32_t g = full("grad.flat", {n_}, p());
    b_.add(block, Opcode::Flatten, {dw1, db1, dw2, db2}, {g});
    return g;
  }

  int32_t bigram(int32_t block, int32_t dataset, bool backward) {
    const int64_t B = o_.microBatch, T = o_.seq, V = o_.classes;
    int32_t idx = full("idx", {B, T}, DType::I32),
            targets = full("targets", {B, T}, DType::I32);
    b_.add(block, Opcode::Batch, {}, {idx, targets}).ints = {dataset};
    int32_t scale = -1;
    if (backward) {
      scale = scalar("accum_scale");
      b_.add(block, Opcode::AccumScale, {}, {scale});
    }
    int32_t flat = flatParams(block, "forward");
    int32_t table = view(block, flat, 0, {V, V});
    int32_t logits = full("logits", {B, T, V}, p());
    b_.add(block, Opcode::Embedding, {table, idx}, {logits});
    int32_t loss = scalar("loss");
    b_.add(block, Opcode::CrossEntropy, {logits, targets}, {loss});
    if (!backward)
      return loss;
    b_.add(block, Opcode::RecordLoss, {loss});
    int32_t dl = full("dlogits", {B, T, V}, p());
    b_.add(block, Opcode::CrossEntropyGrad, {scale, logits, targets}, {dl});
    int32_t dtable = full("dtable", {V, V}, p());
    b_.add(block, Opcode::EmbeddingGrad, {dl, idx}, {dtable}).ints = {V};
    int32_t g = full("grad.flat", {n_}, p());
    b_.add(block, Opcode::Flatten, {dtable}, {g});
    return g;
  }

  void optimizerStep(int32_t step, int32_t g) {
    int32_t total = full("grad.total", {n_});
    b_.add(step, Opcode::GradTotal, {g, acc_}, {total});
    // The gradient the optimizer takes, and the shard the norm sums.
    int32_t grad = total, normShard = -1;
    switch (o_.preset) {
    case Preset::Single:
    case Preset::Ddp:
    case Preset::Zero1: {
      int32_t reduced = total;
      if (o_.preset != Preset::Single) {
        reduced = full("grad.reduced", {n_});
        b_.add(step, Opcode::AllReduce, {total}, {reduced}).ints = {
            static_cast<int64_t>(Group::World),
            static_cast<int64_t>(fb::Reduction::Avg), 1};
      }
      grad = reduced;
      if (o_.preset == Preset::Zero1 || o_.clip > 0) {
        normShard = shard("grad.slice");
        b_.add(step, Opcode::ShardSlice, {reduced}, {normShard}).ints = {
            static_cast<int64_t>(Group::World)};
      }
      if (o_.preset == Preset::Zero1)
        grad = normShard;
      break;
    }
    case Preset::FsdpGradOp:
    case Preset::FsdpFull:
    case Preset::Hybrid:
      grad = normShard = shard("grad.shard");
      b_.add(step, Opcode::ReduceScatter, {total}, {grad}).ints = {
          static_cast<int64_t>(stateGroup()),
          static_cast<int64_t>(fb::Reduction::Avg), 1, 0};
      if (o_.preset == Preset::Hybrid) {
        // Then the average of the shard groups' shards.
        int32_t across = shard("grad.replicated");
        b_.add(step, Opcode::AllReduce, {grad}, {across}).ints = {
            static_cast<int64_t>(Group::Replicate),
            static_cast<int64_t>(fb::Reduction::Avg), 1};
        grad = normShard = across;
      }
      break;
    }
    if (o_.clip > 0) {
      int32_t sq = scalar("norm.sq");
      b_.add(step, Opcode::GlobalNorm, {normShard}, {sq}).ints = {1};
      int32_t sum = scalar("norm.sq.sum");
      // A shard group holds one copy of every gradient.
      b_.add(step, Opcode::AllReduce, {sq}, {sum}).ints = {
          static_cast<int64_t>(stateGroup()),
          static_cast<int64_t>(fb::Reduction::Sum), 2};
      int32_t norm = scalar("norm");
      b_.add(step, Opcode::Sqrt, {sum}, {norm});
      bool isShard = b_.plan().buffers[grad]->size_kind == fb::SizeKind::Shard;
      int32_t clipped =
          isShard ? shard("grad.clipped") : full("grad.clipped", {n_});
      b_.add(step, Opcode::Clip, {grad, norm}, {clipped}).floats = {o_.clip};
      grad = clipped;
    }
    int32_t st = scalar("step", DType::I64);
    b_.add(step, Opcode::Step, {}, {st});
    int32_t one = scalar("one", DType::I64);
    b_.add(step, Opcode::Constant, {}, {one}).ints = {1};
    int32_t t = scalar("step.plus.one", DType::I64);
    b_.add(step, Opcode::ScalarArith, {st, one}, {t}).ints = {
        static_cast<int64_t>(fb::ArithKind::Add)};
    int32_t lr = scalar("lr");
    b_.add(step, Opcode::Lr, {st}, {lr});
    auto load = [&](int32_t state, const char *name) {
      int32_t v = shardedMaster() ? shard(name) : full(name, {n_});
      b_.add(step, Opcode::StateLoad, {state}, {v});
      return v;
    };
    auto like = [&](const char *name) {
      return shardedMaster() ? shard(name) : full(name, {n_});
    };
    int32_t param = load(master_, "p");
    int32_t newParam = like("p.new");
    if (o_.adamw) {
      int32_t m = load(m_, "m"), v = load(v_, "v");
      int32_t m2 = like("m.new"), v2 = like("v.new");
      b_.add(step, Opcode::AdamWUpdate, {param, grad, m, v, lr, t},
             {newParam, m2, v2})
          .floats = {0.9, 0.95, 1e-8, o_.weightDecay};
      b_.add(step, Opcode::StateStore, {m2}, {m_});
      b_.add(step, Opcode::StateStore, {v2}, {v_});
    } else {
      int32_t mom = load(m_, "momentum");
      int32_t mom2 = like("momentum.new");
      fb::InstructionT &sgd = b_.add(
          step, Opcode::SgdUpdate, {param, grad, mom, lr, t}, {newParam, mom2});
      sgd.floats = {0.9, 0.0, o_.weightDecay};
      sgd.ints = {0};
      b_.add(step, Opcode::StateStore, {mom2}, {m_});
    }
    b_.add(step, Opcode::StateStore, {newParam}, {master_});
    if (params_ < 0)
      return;
    int32_t cast = newParam;
    if (mixed()) {
      cast = shardedMaster() ? shard("p.cast", p()) : full("p.cast", {n_}, p());
      b_.add(step, Opcode::Cast, {newParam}, {cast});
    }
    if (o_.preset == Preset::Zero1 || o_.preset == Preset::FsdpGradOp) {
      int32_t gathered = full("p.gathered", {n_}, p());
      b_.add(step, Opcode::AllGather, {cast}, {gathered}).ints = {
          static_cast<int64_t>(Group::World), 3, 0};
      cast = gathered;
    }
    b_.add(step, Opcode::StateStore, {cast}, {params_});
  }

  void hooks() {
    int32_t hooks = b_.addBlock(fb::BlockKind::Hooks);
    b_.setHooksBlock(hooks);
    if (o_.logEvery > 0) {
      int32_t every = b_.addBlock(fb::BlockKind::Every);
      fb::InstructionT &e = b_.add(hooks, Opcode::Every);
      e.ints = {o_.logEvery, static_cast<int64_t>(fb::PeriodUnit::Steps)};
      e.blocks = {every};
      int32_t loss = scalar("hook.loss");
      b_.add(every, Opcode::Loss, {}, {loss});
      int32_t mean = scalar("hook.mean");
      b_.add(every, Opcode::AllReduce, {loss}, {mean}).ints = {
          static_cast<int64_t>(Group::World),
          static_cast<int64_t>(fb::Reduction::Avg), -1};
      b_.add(every, Opcode::Log, {mean}).strings = {"train"};
      if (o_.exitAbove > 0) {
        int32_t limit = scalar("limit", DType::F64);
        b_.add(every, Opcode::Constant, {}, {limit}).floats = {o_.exitAbove};
        int32_t wide = scalar("hook.mean.f64", DType::F64);
        b_.add(every, Opcode::ScalarConvert, {mean}, {wide});
        int32_t above = scalar("diverged", DType::Bool);
        b_.add(every, Opcode::ScalarCompare, {wide, limit}, {above}).ints = {
            static_cast<int64_t>(fb::CompareKind::Gt)};
        int32_t then = b_.addBlock(fb::BlockKind::Then);
        b_.add(every, Opcode::If, {above}).blocks = {then};
        b_.add(then, Opcode::Print, {mean}).strings = {"loss diverged"};
        b_.add(then, Opcode::Exit).strings = {"loss diverged"};
      }
    }
    if (o_.exitAtStep > 0) {
      int32_t st = scalar("hook.step", DType::I64);
      b_.add(hooks, Opcode::Step, {}, {st});
      int32_t at = scalar("hook.exit.at", DType::I64);
      b_.add(hooks, Opcode::Constant, {}, {at}).ints = {o_.exitAtStep};
      int32_t reached = scalar("hook.reached", DType::Bool);
      b_.add(hooks, Opcode::ScalarCompare, {st, at}, {reached}).ints = {
          static_cast<int64_t>(fb::CompareKind::Ge)};
      int32_t then = b_.addBlock(fb::BlockKind::Then);
      b_.add(hooks, Opcode::If, {reached}).blocks = {then};
      fb::InstructionT &print = b_.add(then, Opcode::Print, {st});
      print.strings = {"stopping at step"};
      print.rank0_only = true;
      fb::InstructionT &exit = b_.add(then, Opcode::Exit);
      exit.strings = {"reached the step limit"};
      if (o_.exitFails)
        exit.ints = {1};
    }
    if (o_.evalEvery > 0) {
      int32_t every = b_.addBlock(fb::BlockKind::Every);
      fb::InstructionT &e = b_.add(hooks, Opcode::Every);
      e.ints = {o_.evalEvery, static_cast<int64_t>(fb::PeriodUnit::Steps)};
      e.blocks = {every};
      int32_t body = b_.addBlock(fb::BlockKind::EvalBody);
      int32_t loss = o_.model == Model::Mlp ? mlp(body, val_, false)
                                            : bigram(body, val_, false);
      b_.add(body, Opcode::Yield, {loss});
      int32_t val = scalar("val");
      fb::InstructionT &eval = b_.add(every, Opcode::Evaluate, {}, {val});
      eval.ints = {val_, o_.evalBatches};
      eval.blocks = {body};
      b_.add(every, Opcode::Log, {val}).strings = {"val", "loss"};
    }
    if (o_.saveEvery > 0) {
      int32_t every = b_.addBlock(fb::BlockKind::Every);
      fb::InstructionT &e = b_.add(hooks, Opcode::Every);
      e.ints = {o_.saveEvery, static_cast<int64_t>(fb::PeriodUnit::Steps)};
      e.blocks = {every};
      fb::InstructionT &save = b_.add(every, Opcode::Save);
      save.ints = {static_cast<int64_t>(o_.saveSharded
                                            ? fb::CheckpointFormat::Sharded
                                            : fb::CheckpointFormat::Full)};
      if (!o_.saveDir.empty())
        save.strings = {o_.saveDir};
      if (o_.saveKeep > 0)
        save.ints.push_back(o_.saveKeep);
    }
    // A failing exit or a save's keep needs the schema version that has
    // them (as mdc writes it).
    if (o_.exitFails || o_.saveKeep > 0)
      b_.plan().schema_version = 3;
  }

  TrainingPlanOptions o_;
  PlanBuilder b_;
  int64_t n_ = 0;
  int32_t unit_ = -1, train_ = -1, val_ = -1;
  int32_t master_ = -1, params_ = -1, m_ = -1, v_ = -1, acc_ = -1;
};

} // namespace

const char *PresetName(Preset preset) {
  switch (preset) {
  case Preset::Single:
    return "single";
  case Preset::Ddp:
    return "ddp";
  case Preset::Zero1:
    return "zero1";
  case Preset::FsdpGradOp:
    return "fsdp-grad-op";
  case Preset::FsdpFull:
    return "fsdp-full";
  case Preset::Hybrid:
    return "fsdp-hybrid";
  }
  return "?";
}

PlanBuilder TrainingPlan(const TrainingPlanOptions &options) {
  return Builder(options).take();
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> TrainingPlanFiles() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> files;
  auto add = [&](const char *name, TrainingPlanOptions o) {
    files.emplace_back(name, TrainingPlan(o).finish());
  };
  // The MLP under fsdp-full with the hooks of models/mlp.mdl: every 10
  // steps the mean loss is logged (and a divergence stops training), every
  // 50 an evaluation on held-out synthetic data; 100 steps.
  TrainingPlanOptions fsdp;
  fsdp.preset = Preset::FsdpFull;
  fsdp.in = 32;
  fsdp.hidden = 64;
  fsdp.classes = 10;
  fsdp.globalBatch = 64;
  fsdp.microBatch = 16;
  fsdp.lr = 0.01;
  fsdp.warmup = 10;
  fsdp.logEvery = 10;
  fsdp.exitAbove = 100.0;
  fsdp.evalEvery = 50;
  fsdp.evalBatches = 4;
  add("train-mlp-fsdp", fsdp);
  TrainingPlanOptions ddp = fsdp;
  ddp.preset = Preset::Ddp;
  add("train-mlp-ddp", ddp);
  // models/mlp.mdl's shapes and recipe: 784 -> 256 -> 10, global batch 64
  // in micro-batches of 16, AdamW 1e-3, cosine over 500 steps, under ddp.
  TrainingPlanOptions mnist;
  mnist.preset = Preset::Ddp;
  mnist.in = 784;
  mnist.hidden = 256;
  mnist.classes = 10;
  mnist.globalBatch = 64;
  mnist.microBatch = 16;
  mnist.lr = 1e-3;
  mnist.warmup = 20;
  mnist.steps = 500;
  mnist.minLr = 1e-5;
  mnist.logEvery = 10;
  mnist.exitAbove = 100.0;
  add("train-mlp-784", mnist);
  // bf16 parameters and activations, f32 masters and reductions.
  TrainingPlanOptions mixed = fsdp;
  mixed.paramDtype = fb::DType::BF16;
  add("train-mlp-fsdp-bf16", mixed);
  // Long enough to kill a rank while it runs: a million steps.
  TrainingPlanOptions endless = fsdp;
  endless.steps = 1000000;
  endless.evalEvery = 0;
  add("train-mlp-long", endless);
  // A constant schedule: no step count, mdrun needs --steps.
  TrainingPlanOptions constant = fsdp;
  constant.schedule = fb::ScheduleKind::Constant;
  constant.warmup = 0;
  add("train-mlp-constant", constant);
  // Stops itself after 5 steps, saving a full checkpoint every 2.
  TrainingPlanOptions stop = fsdp;
  stop.exitAtStep = 5;
  stop.saveEvery = 2;
  stop.saveDir = "ckpt";
  add("train-mlp-stop", stop);
  // A learning rate that overflows the loss.
  TrainingPlanOptions diverge = fsdp;
  diverge.adamw = false;
  diverge.lr = 1e30;
  diverge.warmup = 0;
  diverge.clip = 0;
  diverge.logEvery = 0;
  add("train-mlp-nan", diverge);
  // A bigram model on a uint16 token file, data/tokens.bin.
  TrainingPlanOptions tokens;
  tokens.model = Model::Bigram;
  tokens.preset = Preset::FsdpFull;
  tokens.classes = 64;
  tokens.seq = 32;
  tokens.globalBatch = 16;
  tokens.microBatch = 4;
  tokens.lr = 0.05;
  tokens.data = fb::DataKind::Tokens;
  tokens.dataPath = "data/tokens.bin";
  tokens.logEvery = 10;
  add("train-bigram-tokens", tokens);
  return files;
}

} // namespace md::plan::examples
