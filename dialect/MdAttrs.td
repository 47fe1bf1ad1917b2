//===- MdAttrs.td - md attributes: init, optimizer, schedule, data, plan -*- tablegen -*-===//
//
// The recipe-level attributes of a training program. Floating-point
// parameters print in their shortest round-tripping form.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDATTRS_TD
#define MD_DIALECT_MDATTRS_TD

include "dialect/MdBase.td"

class MD_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Md_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def MD_InitAttr : MD_Attr<"Init", "init"> {
  let summary = "how a parameter is initialised";
  let description = [{
    `#md.init<zeros>`, `#md.init<ones>`, `#md.init<constant(0.5)>`,
    `#md.init<normal(0.0, 0.02)>` (mean, standard deviation) and
    `#md.init<uniform(-0.1, 0.1)>` (low, high). Every rank draws the same
    values from the recipe's seed and the parameter's name, so initialisation
    never differs between ranks.
  }];
  let parameters = (ins "::md::InitKind":$kind,
                        ArrayRefParameter<"::llvm::APFloat", "arguments">:$args);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def MD_ParamGroupAttr : MD_Attr<"ParamGroup", "param_group"> {
  let summary = "an optimizer parameter group: which parameters, their decay and lr scale";
  let description = [{
    `#md.param_group<match = "*.bias", weight_decay = 0.0, lr_scale = 1.0>`,
    `#md.param_group<ndim = 1, weight_decay = 0.0, lr_scale = 1.0>`. A
    trainable parameter is a member when its name matches the glob `match`
    (`*` any run of characters, dots included; `?` one character; `[...]`
    a class) and, when `ndim` is given (>= 0), it has that many dims; a
    group states at least one of the two. Members take the group's
    `weight_decay` and the schedule's rate times `lr_scale` instead of the
    optimizer's. The optimizer's `groups` list is searched in order and
    the first group a parameter matches is its group; a parameter matching
    none is in the default group (the optimizer's own values).
  }];
  let parameters = (ins
      StringRefParameter<"name glob", [{""}]>:$match,
      DefaultValuedParameter<"int64_t", "-1">:$ndim,
      APFloatParameter<"">:$weight_decay, APFloatParameter<"">:$lr_scale);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether a parameter named `name` with `ndim` dims is a member.
    bool matches(::llvm::StringRef name, int64_t ndim) const;
    /// How the recipe selected the members: `match = "*.bias", ndim = 1`.
    std::string describe() const;
  }];
}

def MD_AdamWAttr : MD_Attr<"AdamW", "adamw"> {
  let summary = "AdamW hyper-parameters (decoupled weight decay)";
  let description = [{
    `#md.adamw<lr = 6.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.1>`.
    The update is PyTorch's `torch.optim.AdamW` with `amsgrad=False`.
    `groups`, when present, lists `#md.param_group`s: parameters with other
    weight decay or learning-rate scale than these (nanoGPT's no-decay
    group of biases and norm weights).
  }];
  let parameters = (ins APFloatParameter<"">:$lr, APFloatParameter<"">:$beta1, APFloatParameter<"">:$beta2,
                        APFloatParameter<"">:$eps, APFloatParameter<"">:$weight_decay,
                        OptionalParameter<"::mlir::ArrayAttr">:$groups);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def MD_SGDAttr : MD_Attr<"SGD", "sgd"> {
  let summary = "SGD hyper-parameters (momentum, dampening, Nesterov)";
  let description = [{
    `#md.sgd<lr = 0.1, momentum = 0.9, dampening = 0.0, weight_decay = 0.0, nesterov = false>`.
    The update is PyTorch's `torch.optim.SGD`. `groups` as in `#md.adamw`.
  }];
  let parameters = (ins APFloatParameter<"">:$lr, APFloatParameter<"">:$momentum, APFloatParameter<"">:$dampening,
                        APFloatParameter<"">:$weight_decay, "bool":$nesterov,
                        OptionalParameter<"::mlir::ArrayAttr">:$groups);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def MD_ScheduleAttr : MD_Attr<"Schedule", "schedule"> {
  let summary = "learning-rate schedule";
  let description = [{
    `#md.schedule<cosine, warmup = 100, steps = 5000, min_lr = 0.0>`: linear
    warmup over `warmup` steps to the optimizer's lr, `lr * (s + 1) /
    (warmup + 1)` at step s as nanoGPT's get_lr (so never 0), then
    constant, linear decay or cosine decay to `min_lr` at step `steps`.
  }];
  let parameters = (ins "::md::ScheduleKind":$kind, "int64_t":$warmup,
                        "int64_t":$steps, APFloatParameter<"">:$min_lr);
  let assemblyFormat = "`<` $kind `,` struct($warmup, $steps, $min_lr) `>`";
  let genVerifyDecl = 1;
}

def MD_DataAttr : MD_Attr<"Data", "data"> {
  let summary = "a data source";
  let description = [{
    `#md.data<tokens, "data/train.bin">`, `#md.data<npy, "x.npy">` or
    `#md.data<synthetic, "", seed = 7>`. The shapes of a batch are the
    forward function's argument shapes; the sampler gives every rank
    disjoint, equally many samples. `seed` (synthetic data only, default 0)
    selects the generated data set independently of the recipe's seed, which
    drives initialisation and shuffling.
  }];
  let parameters = (ins "::md::DataKind":$kind, StringRefParameter<>:$path,
                        DefaultValuedParameter<"int64_t", "0">:$seed);
  let assemblyFormat = "`<` $kind `,` $path (`,` `seed` `=` $seed^)? `>`";
  let builders = [
    AttrBuilder<(ins "::md::DataKind":$kind, "::llvm::StringRef":$path), [{
      return $_get($_ctxt, kind, path, 0);
    }]>
  ];
  let genVerifyDecl = 1;
}

def MD_PlanAttr : MD_Attr<"Plan", "plan"> {
  let summary = "a parallelism plan: sharding, wrap units, precision, overlap";
  let description = [{
    The resolved plan of a model (`md.model ... attributes {plan = ...}`):
    a built-in preset with the overrides of a `plan` of the .mdl file. Every
    field is explicit; nothing is left to a default.

    ```mlir
    #md.plan<name = "fsdp-full", preset = "fsdp-full", shard = full,
             wrap = blocks(h),
             precision = {param = bf16, reduce = f32, buffer = f32, master = f32},
             bucket_cap = 26214400, prefetch = {forward = true, backward = pre},
             reshard_after_forward = true, checkpoint_activations = none>
    ```

    - `shard`: `none` (DDP: everything replicated), `optimizer` (ZeRO-1),
      `grad_op` (ZeRO-2), `full` (ZeRO-3/FSDP) or `hybrid(shard_group = N)`
      (HSDP: full sharding within groups of N > 1 ranks, replication across
      them).
    - `wrap`: the wrap units (FSDP units): `blocks(h, ...)`, one unit per
      instance of the named repeated parameters; `size(min_params = N)`,
      units of at least N parameters; or `none`, one unit for the model.
    - `precision`: the dtype parameters are computed in (`param`), gradients
      are reduced in (`reduce`), buffers are kept in (`buffer`), and the master
      weights with the optimizer state (`master`); each bf16, f16 or f32.
      `master` must be f32: md's optimizer updates read and write f32 state.
    - `bucket_cap`: the largest communication bucket, in bytes (> 0).
    - `prefetch`: whether the forward pass all-gathers the next unit ahead of
      use, and whether the backward pass does so before (`pre`) or after
      (`post`) the current unit's gradient, or not at all (`none`).
    - `reshard_after_forward`: free gathered parameters after the forward
      pass and gather them again in the backward pass.
    - `checkpoint_activations`: the repeated parameters whose instances
      recompute their activations in the backward pass (`blocks(h)`), or
      `none`.
    - `name`: the plan's name; `preset`: the built-in preset it extends
      (`single`, `ddp`, `zero1`, `fsdp-grad-op`, `fsdp-full`, `fsdp-hybrid`).
      `single` runs on one rank (the model's `world_size` is 1).
  }];
  let parameters = (ins
    StringRefParameter<"the plan's name">:$name,
    StringRefParameter<"the built-in preset it extends">:$preset,
    AttrParameter<"::md::ShardKind", "what is sharded">:$shard,
    OptionalParameter<"::std::optional<int64_t>", "shard group size (hybrid only)">:$shard_group_size,
    AttrParameter<"::md::WrapKind", "how wrap units are formed">:$wrap,
    ArrayRefParameter<"::mlir::StringAttr", "repeated params that are wrap units">:$wrap_blocks,
    OptionalParameter<"::std::optional<int64_t>", "min params of a unit (size wrap only)">:$wrap_min_params,
    AttrParameter<"::mlir::Type", "dtype params are computed in">:$param_dtype,
    AttrParameter<"::mlir::Type", "dtype gradients are reduced in">:$reduce_dtype,
    AttrParameter<"::mlir::Type", "dtype buffers are kept in">:$buffer_dtype,
    AttrParameter<"::mlir::Type", "dtype of master weights and optimizer state">:$master_dtype,
    AttrParameter<"int64_t", "largest bucket in bytes">:$bucket_cap,
    AttrParameter<"bool", "forward prefetch">:$prefetch_forward,
    AttrParameter<"::md::PrefetchBackward", "backward prefetch">:$prefetch_backward,
    AttrParameter<"bool", "free gathered params after forward">:$reshard_after_forward,
    ArrayRefParameter<"::mlir::StringAttr", "repeated params that recompute activations">:$checkpoint_activations);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The built-in presets, in the order diagnostics list them.
    static ::llvm::ArrayRef<::llvm::StringRef> getPresetNames();
    /// Whether the plan pins the world size to one rank (`single`).
    bool isSingleRank() { return getPreset() == "single"; }
  }];
}

#endif // MD_DIALECT_MDATTRS_TD
