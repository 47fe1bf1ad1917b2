// RUN: md-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(md.model(md-apply-plan))'

// expected-error @+1 {{'md.model' op has no '#md.plan' to apply}}
md.model @no_plan {
}

// -----

// expected-error @+1 {{'md.model' op has no 'md.train' recipe to build a step for}}
md.model @no_train attributes {plan = #md.plan<name = "ddp", preset = "ddp", shard = none, wrap = none, precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

md.model @no_grad attributes {plan = #md.plan<name = "ddp", preset = "ddp", shard = none, wrap = none, precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{'md.train' op needs the gradient function @forward.grad (run md-autodiff first)}}
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}

// -----

md.model @twice attributes {plan = #md.plan<name = "ddp", preset = "ddp", shard = none, wrap = none, precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{'md.train' op already has a step program (md-apply-plan ran twice?)}}
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
    %s = md.accum_scale : tensor<f32>
  } hooks {
  }
}

// -----

// Frozen parameters are fine (md-apply-plan.mlir); a model with nothing but
// frozen parameters trains nothing.
// expected-error @+1 {{'md.model' op has no trainable parameter: every 'md.param' is frozen, so a step would train nothing}}
md.model @frozen attributes {plan = #md.plan<name = "ddp", preset = "ddp", shard = none, wrap = none, precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
  md.param @w : tensor<2xf32> init <zeros> frozen
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @forward.grad(%x: tensor<2xf32>, %d: tensor<f32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}

// -----

md.model @missing_grad attributes {plan = #md.plan<name = "ddp", preset = "ddp", shard = none, wrap = none, precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
  // expected-error @+1 {{'md.param' op has no gradient in @forward.grad (run md-autodiff first)}}
  md.param @w : tensor<2xf32> init <zeros>
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @forward.grad(%x: tensor<2xf32>, %d: tensor<f32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}

// -----

// A plan that all-reduces full gradients has no shard to accumulate.
// expected-error @+1 {{'md.model' op 'grad_accumulation = sharded' needs a plan that reduce-scatters gradients (shard = grad_op, full or hybrid), got shard = none}}
md.model @sharded_accumulation_ddp attributes {md.grad_accumulation = "sharded", plan = #md.plan<name = "ddp", preset = "ddp", shard = none, wrap = none, precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
  md.param @w : tensor<2xf32> init <zeros> unit 0
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<2xf32>
    %p = md.mul %x, %w : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
    %l = md.sum %p dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @forward.grad(%x: tensor<2xf32>, %dl: tensor<f32>) -> (tensor<f32>, tensor<2xf32> {md.grad_of = @w}) {
    %w = md.param_ref @w : tensor<2xf32>
    %p = md.mul %x, %w : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
    %l = md.sum %p dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l, %x : tensor<f32>, tensor<2xf32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}
