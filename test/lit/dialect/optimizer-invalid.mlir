// RUN: md-opt %s -split-input-file -verify-diagnostics

func.func @adamw_update_grad_shape(%p: tensor<8x4xf32>, %g: tensor<4x8xbf16>, %m: tensor<8x4xf32>, %v: tensor<8x4xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.adamw_update' op grad shape 4x8 does not match param shape 8x4}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %s beta1 0.9 beta2 0.95 eps 1.0e-8 weight_decay 0.1 : tensor<8x4xf32>, tensor<4x8xbf16>
  return
}

// -----

func.func @adamw_update_m_shape(%p: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<4xf32>, %v: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.adamw_update' op m shape 4 does not match param shape 8}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %s beta1 0.9 beta2 0.95 eps 1.0e-8 weight_decay 0.1 : tensor<8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<8xf32>
  return
}

// -----

func.func @adamw_update_v_not_f32(%p: tensor<8xbf16>, %g: tensor<8xbf16>, %m: tensor<8xf32>, %v: tensor<8xbf16>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.adamw_update' op v must be f32 (optimizer state is kept in f32), got 'bf16'}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %s beta1 0.9 beta2 0.95 eps 1.0e-8 weight_decay 0.1 : tensor<8xbf16>, tensor<8xbf16>, tensor<8xf32>, tensor<8xbf16>
  return
}

// -----

func.func @adamw_update_beta1_one(%p: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.adamw_update' op beta1 must be in [0, 1), got 1}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %s beta1 1.0 beta2 0.95 eps 1.0e-8 weight_decay 0.1 : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @adamw_update_beta2_negative(%p: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.adamw_update' op beta2 must be in [0, 1), got -0.5}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %s beta1 0.9 beta2 -0.5 eps 1.0e-8 weight_decay 0.1 : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @adamw_update_eps_zero(%p: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.adamw_update' op eps must be > 0, got 0}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %s beta1 0.9 beta2 0.95 eps 0.0 weight_decay 0.1 : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @adamw_update_weight_decay_negative(%p: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.adamw_update' op weight_decay must be >= 0, got -0.01}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %s beta1 0.9 beta2 0.95 eps 1.0e-8 weight_decay -0.01 : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @adamw_update_int_grad(%p: tensor<8xf32>, %g: tensor<8xi32>, %m: tensor<8xf32>, %v: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.adamw_update' op operand #1 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %s beta1 0.9 beta2 0.95 eps 1.0e-8 weight_decay 0.1 : tensor<8xf32>, tensor<8xi32>
  return
}

// -----

func.func @sgd_update_grad_shape(%p: tensor<8xf32>, %g: tensor<16xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.sgd_update' op grad shape 16 does not match param shape 8}}
  %p2 = md.sgd_update %p, %g, %lr, %s : tensor<8xf32>, tensor<16xf32>
  return
}

// -----

func.func @sgd_update_momentum_negative(%p: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.sgd_update' op momentum must be >= 0, got -0.9}}
  %p2, %b2 = md.sgd_update %p, %g momentum_buffer %b, %lr, %s momentum -0.9 : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @sgd_update_weight_decay_negative(%p: tensor<8xf32>, %g: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.sgd_update' op weight_decay must be >= 0, got -0.0001}}
  %p2 = md.sgd_update %p, %g, %lr, %s weight_decay -1.0e-4 : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @sgd_update_nesterov_without_momentum(%p: tensor<8xf32>, %g: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.sgd_update' op nesterov needs momentum > 0 and dampening = 0, got momentum 0 and dampening 0}}
  %p2 = md.sgd_update %p, %g, %lr, %s nesterov : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @sgd_update_nesterov_with_dampening(%p: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.sgd_update' op nesterov needs momentum > 0 and dampening = 0, got momentum 0.9 and dampening 0.1}}
  %p2, %b2 = md.sgd_update %p, %g momentum_buffer %b, %lr, %s momentum 0.9 dampening 0.1 nesterov : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @sgd_update_momentum_without_buffer(%p: tensor<8xf32>, %g: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.sgd_update' op with momentum 0.9 needs a momentum_buffer operand}}
  %p2 = md.sgd_update %p, %g, %lr, %s momentum 0.9 : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @sgd_update_buffer_without_momentum(%p: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.sgd_update' op has a momentum_buffer but momentum is 0; plain SGD keeps no buffer}}
  %p2, %b2 = md.sgd_update %p, %g momentum_buffer %b, %lr, %s : tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @sgd_update_buffer_shape(%p: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<2x4xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.sgd_update' op momentum_buffer shape 2x4 does not match param shape 8}}
  %p2, %b2 = md.sgd_update %p, %g momentum_buffer %b, %lr, %s momentum 0.9 : tensor<8xf32>, tensor<8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @sgd_update_buffer_not_f32(%p: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<8xf16>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.sgd_update' op momentum_buffer must be f32 (optimizer state is kept in f32), got 'f16'}}
  %p2, %b2 = md.sgd_update %p, %g momentum_buffer %b, %lr, %s momentum 0.9 : tensor<8xf32>, tensor<8xf32>, tensor<8xf16>
  return
}

// -----

func.func @sgd_update_buffer_type_without_buffer(%p: tensor<8xf32>, %g: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{a third type is the momentum buffer's, but there is no momentum_buffer operand}}
  %p2 = md.sgd_update %p, %g, %lr, %s : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @global_norm_no_operands() {
  // expected-error @+1 {{'md.global_norm' op needs at least one tensor}}
  %n = "md.global_norm"() : () -> tensor<f32>
  return
}

// -----

func.func @global_norm_bf16_result(%g: tensor<8xf32>) {
  // expected-error @+1 {{'md.global_norm' op result #0 must be 0D tensor of 32-bit float values}}
  %n = md.global_norm %g : tensor<8xf32> -> tensor<bf16>
  return
}

// -----

func.func @clip_max_norm_zero(%g: tensor<8xf32>, %n: tensor<f32>) {
  // expected-error @+1 {{'md.clip' op max_norm must be > 0, got 0}}
  %c = md.clip %g, %n max_norm 0.0 : tensor<8xf32>
  return
}

// -----

func.func @clip_max_norm_negative(%g: tensor<8xf32>, %n: tensor<f32>) {
  // expected-error @+1 {{'md.clip' op max_norm must be > 0, got -1}}
  %c = md.clip %g, %n max_norm -1.0 : tensor<8xf32>
  return
}

// -----

func.func @clip_no_grads(%n: tensor<f32>) {
  // expected-error @+1 {{'md.clip' op needs at least one gradient}}
  "md.clip"(%n) <{max_norm = 1.0 : f64}> : (tensor<f32>) -> ()
  return
}

// -----

func.func @clip_missing_norm(%g: tensor<8xf32>) {
  // expected-error @+1 {{expected the gradients and then the norm}}
  %c = md.clip %g max_norm 1.0 : tensor<8xf32>
  return
}

// -----

func.func @clip_type_count(%g: tensor<8xf32>, %h: tensor<8xf32>, %n: tensor<f32>) {
  // expected-error @+1 {{number of operands and types do not match: got 2 operands and 1 types}}
  %c = md.clip %g, %h, %n max_norm 1.0 : tensor<8xf32>
  return
}

// -----

func.func @clip_result_type(%g: tensor<8xbf16>, %n: tensor<f32>) {
  // expected-error @+2 {{'md.clip' op failed to infer returned types}}
  // expected-error @+1 {{'md.clip' op inferred type(s) 'tensor<8xbf16>' are incompatible with return type(s) of operation 'tensor<8xf32>'}}
  %c = "md.clip"(%g, %n) <{max_norm = 1.0 : f64}> : (tensor<8xbf16>, tensor<f32>) -> tensor<8xf32>
  return
}

// -----

func.func @adamw_update_negative_unit(%p: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>, %lr: f32, %s: i64) {
  // expected-error @+1 {{'md.adamw_update' op attribute 'unit' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %s beta1 0.9 beta2 0.95 eps 1.0e-8 weight_decay 0.1 unit -1 : tensor<8xf32>, tensor<8xf32>
  return
}
