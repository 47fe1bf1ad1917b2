// RUN: md-opt %s | md-opt | FileCheck %s

// CHECK-LABEL: func.func @adamw_update
// CHECK-SAME: (%[[P:.*]]: tensor<768xf32>, %[[G:.*]]: tensor<768xbf16>, %[[M:.*]]: tensor<768xf32>, %[[V:.*]]: tensor<768xf32>, %[[LR:.*]]: f32, %[[S:.*]]: i64)
func.func @adamw_update(%p: tensor<768xf32>, %g: tensor<768xbf16>, %m: tensor<768xf32>,
                        %v: tensor<768xf32>, %lr: f32, %step: i64)
    -> (tensor<768xf32>, tensor<768xf32>, tensor<768xf32>) {
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}} = md.adamw_update %[[P]], %[[G]], %[[M]], %[[V]], %[[LR]], %[[S]] beta1 0.9 beta2 0.95 eps 1.0e-08 weight_decay 0.1 : tensor<768xf32>, tensor<768xbf16>
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %step
      beta1 0.9 beta2 0.95 eps 1.0e-8 weight_decay 0.1 : tensor<768xf32>, tensor<768xbf16>
  return %p2, %m2, %v2 : tensor<768xf32>, tensor<768xf32>, tensor<768xf32>
}

// A bf16 parameter with an f32 gradient; the moments stay f32. Zero weight
// decay and the explicit moment types (which are the implied ones) print in
// the short form.
// CHECK-LABEL: func.func @adamw_update_bf16_param
func.func @adamw_update_bf16_param(%p: tensor<4x8xbf16>, %g: tensor<4x8xf32>, %m: tensor<4x8xf32>,
                                   %v: tensor<4x8xf32>, %lr: f32, %step: i64) -> tensor<4x8xbf16> {
  // CHECK: md.adamw_update %{{.*}} beta1 0.0 beta2 0.999 eps 1.0e-06 weight_decay 0.0 : tensor<4x8xbf16>, tensor<4x8xf32>{{$}}
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %step
      beta1 0.0 beta2 0.999 eps 1.0e-6 weight_decay 0.0
      : tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  return %p2 : tensor<4x8xbf16>
}

// CHECK-LABEL: func.func @sgd_update_plain
// CHECK-SAME: (%[[P:.*]]: tensor<64x32xf32>, %[[G:.*]]: tensor<64x32xf32>, %[[LR:.*]]: f32, %{{.*}}: i64)
func.func @sgd_update_plain(%p: tensor<64x32xf32>, %g: tensor<64x32xf32>, %lr: f32, %s: i64) -> tensor<64x32xf32> {
  // CHECK: %{{.*}} = md.sgd_update %[[P]], %[[G]], %[[LR]], %{{.*}} : tensor<64x32xf32>, tensor<64x32xf32>{{$}}
  %p2 = md.sgd_update %p, %g, %lr, %s : tensor<64x32xf32>, tensor<64x32xf32>
  return %p2 : tensor<64x32xf32>
}

// Zero hyper-parameters are the defaults and are left out when printed.
// CHECK-LABEL: func.func @sgd_update_weight_decay
func.func @sgd_update_weight_decay(%p: tensor<8xf32>, %g: tensor<8xbf16>, %lr: f32, %s: i64) -> tensor<8xf32> {
  // CHECK: md.sgd_update %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} weight_decay 0.01 : tensor<8xf32>, tensor<8xbf16>{{$}}
  %p2 = md.sgd_update %p, %g, %lr, %s momentum 0.0 dampening 0.0 weight_decay 0.01 : tensor<8xf32>, tensor<8xbf16>
  return %p2 : tensor<8xf32>
}

// CHECK-LABEL: func.func @sgd_update_momentum
// CHECK-SAME: (%[[P:.*]]: tensor<8xf32>, %[[G:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8xf32>, %[[LR:.*]]: f32, %{{.*}}: i64)
func.func @sgd_update_momentum(%p: tensor<8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %lr: f32, %s: i64)
    -> (tensor<8xf32>, tensor<8xf32>) {
  // CHECK: %{{.*}}, %{{.*}} = md.sgd_update %[[P]], %[[G]] momentum_buffer %[[B]], %[[LR]], %{{.*}} momentum 0.9 dampening 0.1 : tensor<8xf32>, tensor<8xf32>{{$}}
  %p2, %b2 = md.sgd_update %p, %g momentum_buffer %b, %lr, %s momentum 0.9 dampening 0.1
      : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  return %p2, %b2 : tensor<8xf32>, tensor<8xf32>
}

// CHECK-LABEL: func.func @sgd_update_nesterov
func.func @sgd_update_nesterov(%p: tensor<64x32xf32>, %g: tensor<64x32xbf16>, %b: tensor<64x32xf32>, %lr: f32, %s: i64)
    -> (tensor<64x32xf32>, tensor<64x32xf32>) {
  // CHECK: md.sgd_update %{{.*}}, %{{.*}} momentum_buffer %{{.*}}, %{{.*}}, %{{.*}} momentum 0.9 weight_decay 0.0001 nesterov : tensor<64x32xf32>, tensor<64x32xbf16>{{$}}
  %p2, %b2 = md.sgd_update %p, %g momentum_buffer %b, %lr, %s momentum 0.9 weight_decay 1.0e-4 nesterov
      : tensor<64x32xf32>, tensor<64x32xbf16>
  return %p2, %b2 : tensor<64x32xf32>, tensor<64x32xf32>
}

// CHECK-LABEL: func.func @global_norm
// CHECK-SAME: (%[[A:.*]]: tensor<768xf32>, %[[B:.*]]: tensor<768x768xbf16>, %[[C:.*]]: tensor<f16>)
func.func @global_norm(%a: tensor<768xf32>, %b: tensor<768x768xbf16>, %c: tensor<f16>) -> tensor<f32> {
  // CHECK: md.global_norm %[[A]], %[[B]], %[[C]] : tensor<768xf32>, tensor<768x768xbf16>, tensor<f16> -> tensor<f32>
  %n = md.global_norm %a, %b, %c : tensor<768xf32>, tensor<768x768xbf16>, tensor<f16> -> tensor<f32>
  return %n : tensor<f32>
}

// CHECK-LABEL: func.func @global_norm_squared
// CHECK-SAME: (%[[A:.*]]: tensor<1024xf32>)
func.func @global_norm_squared(%shard: tensor<1024xf32>) -> tensor<f32> {
  // CHECK: md.global_norm %[[A]] squared : tensor<1024xf32> -> tensor<f32>
  %sq = md.global_norm %shard squared : tensor<1024xf32> -> tensor<f32>
  return %sq : tensor<f32>
}

// CHECK-LABEL: func.func @clip
// CHECK-SAME: (%[[A:.*]]: tensor<768xf32>, %[[B:.*]]: tensor<768x768xbf16>, %[[N:.*]]: tensor<f32>)
func.func @clip(%a: tensor<768xf32>, %b: tensor<768x768xbf16>, %norm: tensor<f32>)
    -> (tensor<768xf32>, tensor<768x768xbf16>) {
  // CHECK: %{{.*}}:2 = md.clip %[[A]], %[[B]], %[[N]] max_norm 1.0 : tensor<768xf32>, tensor<768x768xbf16>
  %c0, %c1 = md.clip %a, %b, %norm max_norm 1.0 : tensor<768xf32>, tensor<768x768xbf16>
  return %c0, %c1 : tensor<768xf32>, tensor<768x768xbf16>
}

// CHECK-LABEL: func.func @clip_one
func.func @clip_one(%a: tensor<16xf16>, %norm: tensor<f32>) -> tensor<16xf16> {
  // CHECK: md.clip %{{.*}}, %{{.*}} max_norm 0.5 : tensor<16xf16>
  %c = md.clip %a, %norm max_norm 5.0e-1 : tensor<16xf16>
  return %c : tensor<16xf16>
}


// With parameter groups an update names its unit (printed last).
// CHECK-LABEL: func.func @grouped_updates
func.func @grouped_updates(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: tensor<?xf32>,
                           %v: tensor<?xf32>, %lr: f32, %step: i64) {
  // CHECK: md.adamw_update {{.*}} weight_decay 0.1 unit 3 : tensor<?xf32>, tensor<?xf32>
  %p2, %m2, %v2 = md.adamw_update %p, %g, %m, %v, %lr, %step
      beta1 0.9 beta2 0.95 eps 1.0e-8 weight_decay 0.1 unit 3 : tensor<?xf32>, tensor<?xf32>
  // CHECK: md.sgd_update {{.*}} momentum 0.9 nesterov unit 0 : tensor<?xf32>, tensor<?xf32>
  %p3, %b3 = md.sgd_update %p, %g momentum_buffer %m, %lr, %step
      momentum 0.9 nesterov unit 0 : tensor<?xf32>, tensor<?xf32>
  return
}
