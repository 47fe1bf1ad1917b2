// RUN: md-opt %s -split-input-file -verify-diagnostics

md.model @model_world_not_multiple_of_shard_group attributes {world_size = 6 : i64, shard_group_size = 4 : i64} {
// expected-error @-1 {{'md.model' op world size 6 is not a multiple of the shard group size 4}}
}

// -----

md.model @model_nonpositive_world attributes {world_size = 0 : i64} {
// expected-error @-1 {{attribute 'world_size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
}

// -----

md.model @model_two_forwards {
  // expected-note @+1 {{the first one is here}}
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{'md.forward' op a model has at most one 'md.forward'}}
  md.forward @forward2(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

md.model @model_two_trains {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-note @+1 {{the first one is here}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
  // expected-error @+1 {{'md.train' op a model has at most one 'md.train'}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @param_dynamic_shape {
  // expected-error @+1 {{'md.param' op parameter shape must be static, got tensor<?x4>}}
  md.param @w : tensor<?x4xf32> init #md.init<zeros>
}

// -----

md.model @param_integer_dtype {
  // expected-error @+1 {{'md.param' op parameter element type must be bf16, f16 or f32, got 'i32'}}
  md.param @w : tensor<4xi32> init #md.init<zeros>
}

// -----

md.model @param_no_elements {
  // expected-error @+1 {{'md.param' op parameter has no elements (shape 0x4)}}
  md.param @w : tensor<0x4xf32> init #md.init<zeros>
}

// -----

func.func @param_outside_model() {
  // expected-error @+1 {{'md.param' op expects parent op 'md.model'}}
  md.param @w : tensor<4xf32> init #md.init<zeros>
  return
}

// -----

md.model @param_init_arity {
  // expected-error @+1 {{initialiser 'normal' takes 2 arguments, got 1}}
  md.param @w : tensor<4xf32> init #md.init<normal(0.02)>
}

// -----

md.model @param_init_zeros_with_argument {
  // expected-error @+1 {{initialiser 'zeros' takes 0 arguments, got 1}}
  md.param @w : tensor<4xf32> init #md.init<zeros(1.0)>
}

// -----

md.model @param_init_negative_std {
  // expected-error @+1 {{normal initialiser needs a positive standard deviation, got -2.000000e-02}}
  md.param @w : tensor<4xf32> init #md.init<normal(0.0, -0.02)>
}

// -----

md.model @param_init_empty_uniform {
  // expected-error @+1 {{uniform initialiser needs low < high, got [1.000000e+00, 1.000000e+00)}}
  md.param @w : tensor<4xf32> init #md.init<uniform(1.0, 1.0)>
}

// -----

md.model @param_init_unknown {
  // expected-error @+1 {{unknown initialiser 'xavier'; expected zeros, ones, constant, normal or uniform}}
  md.param @w : tensor<4xf32> init #md.init<xavier>
}

// -----

md.model @param_ref_not_a_param {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    // expected-error @+1 {{'md.param_ref' op 'nope' is not a parameter of model 'param_ref_not_a_param'}}
    %w = md.param_ref @nope : tensor<4xf32>
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

md.model @param_ref_type_mismatch {
  // expected-note @+1 {{parameter declared here}}
  md.param @w : tensor<4xf32> init #md.init<zeros>
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    // expected-error @+1 {{'md.param_ref' op type 'tensor<4xbf16>' does not match parameter 'w' of type 'tensor<4xf32>'}}
    %w = md.param_ref @w : tensor<4xbf16>
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

func.func @param_ref_outside_model() {
  // expected-error @+1 {{'md.param_ref' op must be nested in an 'md.model'}}
  %w = md.param_ref @w : tensor<4xf32>
  return
}

// -----

md.model @forward_loss_not_scalar {
  // expected-error @+1 {{'md.forward' op first result must be the scalar loss tensor<f32>, got tensor<2xf32>}}
  md.forward @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
    md.return %x : tensor<2xf32>
  }
}

// -----

md.model @forward_no_result {
  // expected-error @+1 {{'md.forward' op first result must be the scalar loss tensor<f32>, got no result}}
  md.forward @forward(%x: tensor<2xf32>) {
    md.return
  }
}

// -----

md.model @forward_entry_block_mismatch {
  // expected-error @+1 {{'md.forward' op type of entry block argument #0('tensor<3xf32>') must match the type of the corresponding argument in function signature('tensor<2xf32>')}}
  "md.forward"() <{function_type = (tensor<2xf32>) -> tensor<f32>, sym_name = "forward"}> ({
  ^bb0(%x: tensor<3xf32>):
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }) : () -> ()
}

// -----

md.model @func_entry_block_arity {
  // expected-error @+1 {{'md.func' op entry block must have 1 arguments to match function signature}}
  "md.func"() <{function_type = (tensor<2xf32>) -> (), sym_name = "f"}> ({
    md.return
  }) : () -> ()
}

// -----

md.model @return_count_mismatch {
  md.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
    // expected-error @+1 {{'md.return' op returns 2 values, but 'f' declares 1}}
    md.return %x, %x : tensor<2xf32>, tensor<2xf32>
  }
}

// -----

md.model @return_type_mismatch {
  md.func @f(%x: tensor<2xf32>, %y: tensor<3xf32>) -> tensor<2xf32> {
    // expected-error @+1 {{'md.return' op result #0 has type 'tensor<3xf32>', but 'f' declares 'tensor<2xf32>'}}
    md.return %y : tensor<3xf32>
  }
}

// -----

func.func @return_outside_function() {
  // expected-error @+1 {{'md.return' op expects parent op to be one of 'md.forward, md.func'}}
  md.return
}

// -----

md.model @call_not_a_func {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
    // expected-error @+1 {{'md.call' op 'forward' is not an 'md.func'}}
    %y = md.call @forward(%x) : (tensor<2xf32>) -> tensor<2xf32>
    md.return %y : tensor<2xf32>
  }
}

// -----

md.model @call_argument_count {
  md.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
    md.return %x : tensor<2xf32>
  }
  md.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
    // expected-error @+1 {{'md.call' op passes 2 arguments to 'g', which takes 1}}
    %y = md.call @g(%x, %x) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    md.return %y : tensor<2xf32>
  }
}

// -----

md.model @call_argument_type {
  md.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
    md.return %x : tensor<2xf32>
  }
  md.func @f(%x: tensor<2xbf16>) -> tensor<2xf32> {
    // expected-error @+1 {{'md.call' op argument #0 has type 'tensor<2xbf16>', but 'g' takes 'tensor<2xf32>'}}
    %y = md.call @g(%x) : (tensor<2xbf16>) -> tensor<2xf32>
    md.return %y : tensor<2xf32>
  }
}

// -----

md.model @call_result_count {
  md.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
    md.return %x : tensor<2xf32>
  }
  md.func @f(%x: tensor<2xf32>) {
    // expected-error @+1 {{'md.call' op expects 0 results from 'g', which returns 1}}
    md.call @g(%x) : (tensor<2xf32>) -> ()
    md.return
  }
}

// -----

md.model @call_result_type {
  md.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
    md.return %x : tensor<2xf32>
  }
  md.func @f(%x: tensor<2xf32>) -> tensor<2xbf16> {
    // expected-error @+1 {{'md.call' op result #0 has type 'tensor<2xbf16>', but 'g' returns 'tensor<2xf32>'}}
    %y = md.call @g(%x) : (tensor<2xf32>) -> tensor<2xbf16>
    md.return %y : tensor<2xbf16>
  }
}

// -----

md.model @train_global_batch_not_multiple_of_micro_batch {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{'md.train' op global_batch 10 is not a multiple of micro_batch 4}}
  md.train @forward data #md.data<synthetic, ""> global_batch 10 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_global_batch_not_multiple_of_world attributes {world_size = 3 : i64} {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{'md.train' op global_batch 8 is not a multiple of micro_batch x world size = 4 x 3 = 12}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_nonpositive_clip {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{'md.train' op clip_grad_norm must be > 0, got 0.000000e+00}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 clip_grad_norm 0.0 step {
  } hooks {
  }
}

// -----

md.model @train_zero_micro_batch {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{'md.train' op attribute 'micro_batch' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 0
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_forward_not_a_forward {
  md.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
    md.return %x : tensor<2xf32>
  }
  // expected-error @+1 {{'md.train' op 'f' is not an 'md.forward'}}
  md.train @f data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_adamw_beta1_out_of_range {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+2 {{adamw beta1 must be in [0, 1), got 1.000000e+00}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.adamw<lr = 1.0e-3, beta1 = 1.0, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_adamw_zero_eps {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+2 {{adamw eps must be > 0, got 0.000000e+00}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 0.0, weight_decay = 0.0>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_sgd_nesterov_without_momentum {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+2 {{sgd nesterov needs momentum > 0 and dampening = 0, got momentum 0.000000e+00 and dampening 0.000000e+00}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = true>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_schedule_warmup_too_long {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+3 {{schedule warmup (20 steps) is longer than the schedule (10 steps)}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<cosine, warmup = 20, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_schedule_no_steps {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+3 {{schedule steps must be > 0, got 0}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 0, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @data_seed_on_a_file {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{only synthetic data has a seed; tokens data is read from 'train.bin'}}
  md.train @forward data #md.data<tokens, "train.bin", seed = 3> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @data_synthetic_with_path {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{synthetic data has no path, got 'x.npy'}}
  md.train @forward data #md.data<synthetic, "x.npy"> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @data_file_without_path {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{npy data needs a path}}
  md.train @forward data #md.data<npy, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @data_negative_seed {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{data seed must be >= 0, got -1}}
  md.train @forward data #md.data<synthetic, "", seed = -1> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_param_group_no_selector {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+3 {{a parameter group needs match = "glob" or ndim = N to select its parameters}}
  // expected-error @+2 {{failed to parse MD_AdamWAttr parameter 'groups'}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.1, groups = [#md.param_group<weight_decay = 0.0, lr_scale = 1.0>]>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_param_group_bad_glob {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+3 {{parameter group match "[a" is not a valid glob: invalid glob pattern, unmatched '['}}
  // expected-error @+2 {{failed to parse MD_AdamWAttr parameter 'groups'}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.1, groups = [#md.param_group<match = "[a", weight_decay = 0.0, lr_scale = 1.0>]>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_param_group_negative_scale {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+3 {{parameter group lr_scale must be >= 0, got -1}}
  // expected-error @+2 {{failed to parse MD_SGDAttr parameter 'groups'}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false, groups = [#md.param_group<ndim = 1, weight_decay = 0.0, lr_scale = -1.0>]>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_param_groups_not_groups {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+2 {{an optimizer's groups must be #md.param_group attributes, got 1 : i64}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.1, groups = [1]>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// -----

md.model @train_param_groups_empty {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+2 {{an optimizer's groups list must not be empty (leave it out instead)}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.1, groups = []>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}
