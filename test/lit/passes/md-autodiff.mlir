// RUN: md-opt %s --md-autodiff | FileCheck %s
// The output is valid md: it verifies and round-trips.
// RUN: md-opt %s --md-autodiff | md-opt | FileCheck %s

// One model per VJP rule (or per form of a rule), then the plumbing: tied
// weights, inlined blocks and their units, frozen parameters, values that
// need no gradient.

//===----------------------------------------------------------------------===//
// The gradient function's signature and tags (nn.Linear + cross-entropy)
//===----------------------------------------------------------------------===//

// CHECK-LABEL: md.model @linear
md.model @linear {
  md.param @fc.weight : tensor<4x8xf32> init <zeros> unit 0
  md.param @fc.bias : tensor<4xf32> init <zeros> unit 0
  md.forward @forward(%x: tensor<2x8xf32>, %y: tensor<2xi32>) -> tensor<f32> {
    %w = md.param_ref @fc.weight : tensor<4x8xf32>
    %b = md.param_ref @fc.bias : tensor<4xf32>
    %h = md.matmul %x, %w bias %b transpose_b : tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %l = md.cross_entropy %h, %y ignore_index -100 : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, "", seed = 0> global_batch 8 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<linear, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}
// The forward is left as it was.
// CHECK:      md.forward @forward(
// CHECK-NOT:    md.unit
// CHECK:        md.return
// CHECK-NEXT: }
// CHECK-NEXT: md.func @forward.grad(%[[X:.*]]: tensor<2x8xf32>, %[[Y:.*]]: tensor<2xi32>, %[[DLOSS:.*]]: tensor<f32>) -> (tensor<f32>, tensor<4x8xf32> {md.grad_of = @fc.weight}, tensor<4xf32> {md.grad_of = @fc.bias}) {
// CHECK-NEXT:   %[[W:.*]] = md.param_ref @fc.weight {md.unit = 0 : i64} : tensor<4x8xf32>
// CHECK-NEXT:   %[[B:.*]] = md.param_ref @fc.bias {md.unit = 0 : i64} : tensor<4xf32>
// CHECK-NEXT:   %[[H:.*]] = md.matmul %[[X]], %[[W]] bias %[[B]] transpose_b {md.unit = 0 : i64}
// CHECK-NEXT:   %[[L:.*]] = md.cross_entropy %[[H]], %[[Y]] ignore_index -100 {md.unit = 0 : i64}
// The seed: %dloss is the gradient of the loss.
// CHECK-NEXT:   %[[DH:.*]] = md.cross_entropy_grad %[[DLOSS]], %[[H]], %[[Y]] ignore_index -100 {md.backward, md.unit = 0 : i64} : tensor<f32>, tensor<2x4xf32>, tensor<2xi32>
// CHECK-NEXT:   %{{.*}}, %[[DW:.*]], %[[DB:.*]] = md.matmul_grad %[[DH]], %[[X]], %[[W]] transpose_b has_bias {md.backward, md.unit = 0 : i64} : tensor<2x4xf32>, tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32>
// CHECK-NEXT:   md.return {md.unit = 0 : i64} %[[L]], %[[DW]], %[[DB]] : tensor<f32>, tensor<4x8xf32>, tensor<4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: md.train @forward

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

// CHECK-LABEL: md.model @matmul_transpose_a
md.model @matmul_transpose_a {
  md.param @w : tensor<8x4xf32> init <zeros>
  md.forward @forward(%x: tensor<8x2xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<8x4xf32>
    %h = md.matmul %x, %w transpose_a : tensor<8x2xf32>, tensor<8x4xf32> -> tensor<2x4xf32>
    %l = md.sum %h dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK: md.func @forward.grad(%[[X:.*]]: tensor<8x2xf32>, %[[DLOSS:.*]]: tensor<f32>)
// CHECK:      %[[W:.*]] = md.param_ref @w
// CHECK:      %[[DH:.*]] = md.sum_grad %[[DLOSS]] dims [0, 1] {md.backward, md.unit = 0 : i64} : tensor<f32> to tensor<2x4xf32>
// CHECK-NEXT: %{{.*}}, %[[DW:.*]] = md.matmul_grad %[[DH]], %[[X]], %[[W]] transpose_a {{.*}}: tensor<2x4xf32>, tensor<8x2xf32>, tensor<8x4xf32> -> tensor<8x2xf32>, tensor<8x4xf32>
// CHECK-NEXT: md.return {{.*}}, %[[DW]] :

// Batched: both operands [3, ., .], both parameters.
// CHECK-LABEL: md.model @matmul_batched
md.model @matmul_batched {
  md.param @a : tensor<3x2x8xf32> init <zeros>
  md.param @b : tensor<3x8x4xf32> init <zeros>
  md.forward @forward() -> tensor<f32> {
    %a = md.param_ref @a : tensor<3x2x8xf32>
    %b = md.param_ref @b : tensor<3x8x4xf32>
    %h = md.matmul %a, %b : tensor<3x2x8xf32>, tensor<3x8x4xf32> -> tensor<3x2x4xf32>
    %l = md.mean %h dims [0, 1, 2] : tensor<3x2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK: md.func @forward.grad(%[[DLOSS:.*]]: tensor<f32>) -> (tensor<f32>, tensor<3x2x8xf32> {md.grad_of = @a}, tensor<3x8x4xf32> {md.grad_of = @b})
// CHECK:      %[[DH:.*]] = md.mean_grad %[[DLOSS]] dims [0, 1, 2] {{.*}}: tensor<f32> to tensor<3x2x4xf32>
// CHECK-NEXT: %[[DA:.*]], %[[DB:.*]] = md.matmul_grad %[[DH]], %{{.*}}, %{{.*}} {md.backward, md.unit = 0 : i64} : tensor<3x2x4xf32>, tensor<3x2x8xf32>, tensor<3x8x4xf32> -> tensor<3x2x8xf32>, tensor<3x8x4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DA]], %[[DB]] :

// A 2-D weight shared by a batched input [B, T, K] (both transposes).
// CHECK-LABEL: md.model @matmul_shared_weight
md.model @matmul_shared_weight {
  md.param @w : tensor<4x8xf32> init <zeros>
  md.forward @forward(%x: tensor<2x8x3xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4x8xf32>
    %h = md.matmul %x, %w transpose_a transpose_b : tensor<2x8x3xf32>, tensor<4x8xf32> -> tensor<2x3x4xf32>
    %l = md.sum %h dims [0, 1, 2] : tensor<2x3x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK: md.matmul_grad %{{.*}}, %{{.*}}, %{{.*}} transpose_a transpose_b {{.*}}: tensor<2x3x4xf32>, tensor<2x8x3xf32>, tensor<4x8xf32> -> tensor<2x8x3xf32>, tensor<4x8xf32>

//===----------------------------------------------------------------------===//
// add, sub, mul, scale: broadcasting undone with md.sum_to
//===----------------------------------------------------------------------===//

// CHECK-LABEL: md.model @add_broadcast
md.model @add_broadcast {
  md.param @p : tensor<3x4xf32> init <zeros>
  md.param @c : tensor<2x1x4xf32> init <zeros>
  md.forward @forward(%x: tensor<2x3x4xf32>) -> tensor<f32> {
    %p = md.param_ref @p : tensor<3x4xf32>
    %c = md.param_ref @c : tensor<2x1x4xf32>
    %h = md.add %x, %p : tensor<2x3x4xf32>, tensor<3x4xf32> -> tensor<2x3x4xf32>
    %k = md.add %c, %h : tensor<2x1x4xf32>, tensor<2x3x4xf32> -> tensor<2x3x4xf32>
    %l = md.sum %k dims [0, 1, 2] : tensor<2x3x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// The data input %x gets no gradient; %h's is dy itself (same shape).
// CHECK: md.func @forward.grad
// CHECK:      %[[DK:.*]] = md.sum_grad
// CHECK-NEXT: %[[DC:.*]] = md.sum_to %[[DK]] {md.backward, md.unit = 0 : i64} : tensor<2x3x4xf32> to tensor<2x1x4xf32>
// CHECK-NEXT: %[[DP:.*]] = md.sum_to %[[DK]] {md.backward, md.unit = 0 : i64} : tensor<2x3x4xf32> to tensor<3x4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DP]], %[[DC]] :

// CHECK-LABEL: md.model @sub_broadcast
md.model @sub_broadcast {
  md.param @p : tensor<4xf32> init <zeros>
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %p = md.param_ref @p : tensor<4xf32>
    %h = md.sub %x, %p : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %l = md.sum %h dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// d(rhs) = -sum_to(dy): the sign on the reduced tensor.
// CHECK: md.func @forward.grad
// CHECK:      %[[DH:.*]] = md.sum_grad
// CHECK-NEXT: %[[S:.*]] = md.sum_to %[[DH]] {{.*}}: tensor<2x4xf32> to tensor<4xf32>
// CHECK-NEXT: %[[DP:.*]] = md.scale %[[S]] by -1.000000e+00 {md.backward, md.unit = 0 : i64} : tensor<4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DP]] :

// CHECK-LABEL: md.model @mul_broadcast
md.model @mul_broadcast {
  md.param @a : tensor<2x4xf32> init <zeros>
  md.param @g : tensor<4xf32> init <ones>
  md.forward @forward() -> tensor<f32> {
    %a = md.param_ref @a : tensor<2x4xf32>
    %g = md.param_ref @g : tensor<4xf32>
    %h = md.mul %a, %g : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %l = md.sum %h dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// d(a) = dy * g; d(g) = sum_to(dy * a).
// CHECK: md.func @forward.grad
// CHECK:      %[[A:.*]] = md.param_ref @a
// CHECK-NEXT: %[[G:.*]] = md.param_ref @g
// CHECK:      %[[DH:.*]] = md.sum_grad
// CHECK-NEXT: %[[DA:.*]] = md.mul %[[DH]], %[[G]] {{.*}}: tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[M:.*]] = md.mul %[[DH]], %[[A]] {{.*}}: tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[DG:.*]] = md.sum_to %[[M]] {{.*}}: tensor<2x4xf32> to tensor<4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DA]], %[[DG]] :

// w * w: both contributions reach w and are summed.
// CHECK-LABEL: md.model @mul_square
md.model @mul_square {
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward() -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %h = md.mul %w, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    %l = md.sum %h dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK: md.func @forward.grad
// CHECK:      %[[W:.*]] = md.param_ref @w
// CHECK:      %[[DH:.*]] = md.sum_grad
// CHECK-NEXT: %[[G1:.*]] = md.mul %[[DH]], %[[W]]
// CHECK-NEXT: %[[G2:.*]] = md.mul %[[DH]], %[[W]]
// CHECK-NEXT: %[[DW:.*]] = md.add %[[G1]], %[[G2]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DW]] :

// CHECK-LABEL: md.model @scale
md.model @scale {
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward() -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %h = md.scale %w by 0.5 : tensor<4xf32>
    %l = md.sum %h dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK: md.func @forward.grad
// CHECK:      %[[DH:.*]] = md.sum_grad
// CHECK-NEXT: %[[DW:.*]] = md.scale %[[DH]] by 5.000000e-01 {md.backward, md.unit = 0 : i64} : tensor<4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DW]] :

//===----------------------------------------------------------------------===//
// Activations, normalisations, softmax, attention
//===----------------------------------------------------------------------===//

// CHECK-LABEL: md.model @activations
md.model @activations {
  md.param @w : tensor<2x4xf32> init <ones>
  md.forward @forward() -> tensor<f32> {
    %w = md.param_ref @w : tensor<2x4xf32>
    %g = md.gelu %w approximate : tensor<2x4xf32>
    %e = md.gelu %g : tensor<2x4xf32>
    %r = md.relu %e : tensor<2x4xf32>
    %l = md.sum %r dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK: md.func @forward.grad
// CHECK:      %[[W:.*]] = md.param_ref @w
// CHECK-NEXT: %[[G:.*]] = md.gelu %[[W]] approximate
// CHECK-NEXT: %[[E:.*]] = md.gelu %[[G]]
// CHECK:      %[[DR:.*]] = md.sum_grad
// CHECK-NEXT: %[[DE:.*]] = md.relu_grad %[[DR]], %[[E]] {md.backward, md.unit = 0 : i64} : tensor<2x4xf32>
// CHECK-NEXT: %[[DG:.*]] = md.gelu_grad %[[DE]], %[[G]] {md.backward, md.unit = 0 : i64} : tensor<2x4xf32>
// CHECK-NEXT: %[[DW:.*]] = md.gelu_grad %[[DG]], %[[W]] approximate {md.backward, md.unit = 0 : i64} : tensor<2x4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DW]] :

// CHECK-LABEL: md.model @layer_norm
md.model @layer_norm {
  md.param @w : tensor<2x3x4xf32> init <ones>
  md.param @ln.weight : tensor<4xf32> init <ones>
  md.param @ln.bias : tensor<4xf32> init <zeros>
  md.param @ln2.weight : tensor<4xf32> init <ones>
  md.forward @forward() -> tensor<f32> {
    %w = md.param_ref @w : tensor<2x3x4xf32>
    %g = md.param_ref @ln.weight : tensor<4xf32>
    %b = md.param_ref @ln.bias : tensor<4xf32>
    %h = md.layer_norm %w, %g, %b : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
    %g2 = md.param_ref @ln2.weight : tensor<4xf32>
    %k = md.layer_norm %h, %g2 eps 2.500000e-01 : tensor<2x3x4xf32>, tensor<4xf32>
    %l = md.sum %k dims [0, 1, 2] : tensor<2x3x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// Without beta no dbeta; with beta, has_beta; eps carried over.
// CHECK: md.func @forward.grad
// CHECK:      %[[H:.*]] = md.layer_norm
// CHECK:      %[[G2:.*]] = md.param_ref @ln2.weight
// CHECK:      %[[DK:.*]] = md.sum_grad
// CHECK-NEXT: %[[DH:.*]], %[[DG2:.*]] = md.layer_norm_grad %[[DK]], %[[H]], %[[G2]] eps 2.500000e-01 {md.backward, md.unit = 0 : i64} : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2x3x4xf32>, tensor<4xf32>
// CHECK-NEXT: %[[DW:.*]], %[[DG:.*]], %[[DB:.*]] = md.layer_norm_grad %[[DH]], %{{.*}}, %{{.*}} has_beta {md.backward, md.unit = 0 : i64} : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DW]], %[[DG]], %[[DB]], %[[DG2]] :

// CHECK-LABEL: md.model @rms_norm
md.model @rms_norm {
  md.param @g : tensor<4xf32> init <ones>
  md.forward @forward(%x: tensor<2x4xbf16>) -> tensor<f32> {
    %g = md.param_ref @g : tensor<4xf32>
    %c = md.cast %g : tensor<4xf32> to tensor<4xbf16>
    %h = md.rms_norm %x, %c eps 2.500000e-01 : tensor<2x4xbf16>, tensor<4xbf16>
    %f = md.cast %h : tensor<2x4xbf16> to tensor<2x4xf32>
    %l = md.sum %f dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// md.cast is differentiated by the cast back.
// CHECK: md.func @forward.grad
// CHECK:      %[[DF:.*]] = md.sum_grad
// CHECK-NEXT: %[[DH:.*]] = md.cast %[[DF]] {md.backward, md.unit = 0 : i64} : tensor<2x4xf32> to tensor<2x4xbf16>
// CHECK-NEXT: %{{.*}}, %[[DC:.*]] = md.rms_norm_grad %[[DH]], %{{.*}}, %{{.*}} eps 2.500000e-01 {md.backward, md.unit = 0 : i64} : tensor<2x4xbf16>, tensor<2x4xbf16>, tensor<4xbf16> -> tensor<2x4xbf16>, tensor<4xbf16>
// CHECK-NEXT: %[[DG:.*]] = md.cast %[[DC]] {md.backward, md.unit = 0 : i64} : tensor<4xbf16> to tensor<4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DG]] :

// CHECK-LABEL: md.model @batch_norm
md.model @batch_norm {
  md.param @bn.weight : tensor<4xf32> init <ones>
  md.param @bn.bias : tensor<4xf32> init <zeros>
  md.forward @forward(%x: tensor<8x2x4xf32>) -> tensor<f32> {
    %g = md.param_ref @bn.weight : tensor<4xf32>
    %b = md.param_ref @bn.bias : tensor<4xf32>
    %y, %mean, %invstd = md.batch_norm %x, %g, %b : tensor<8x2x4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<8x2x4xf32>, tensor<4xf32>, tensor<4xf32>
    %l = md.mean %y dims [0, 1, 2] : tensor<8x2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// The statistics the forward returned feed the gradient.
// CHECK: md.func @forward.grad(%[[X:[^:]*]]: tensor<8x2x4xf32>
// CHECK:      %[[G:.*]] = md.param_ref @bn.weight
// CHECK:      %{{.*}}, %[[MEAN:.*]], %[[INVSTD:.*]] = md.batch_norm %[[X]], %[[G]]
// CHECK:      %[[DY:.*]] = md.mean_grad
// CHECK-NEXT: %{{.*}}, %[[DG:.*]], %[[DB:.*]] = md.batch_norm_grad %[[DY]], %[[X]], %[[G]], %[[MEAN]], %[[INVSTD]] {md.backward, md.unit = 0 : i64} : tensor<8x2x4xf32>, tensor<8x2x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<8x2x4xf32>, tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DG]], %[[DB]] :

// CHECK-LABEL: md.model @softmax
md.model @softmax {
  md.param @w : tensor<2x4xf32> init <ones>
  md.forward @forward(%t: tensor<2x4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<2x4xf32>
    %p = md.softmax %w axis 0 : tensor<2x4xf32>
    %h = md.mul %p, %t : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
    %l = md.sum %h dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// softmax_grad takes the forward's output and its axis.
// CHECK: md.func @forward.grad(%[[T:[^:]*]]: tensor<2x4xf32>
// CHECK:      %[[P:.*]] = md.softmax %{{.*}} axis 0
// CHECK:      %[[DH:.*]] = md.sum_grad
// CHECK-NEXT: %[[DP:.*]] = md.mul %[[DH]], %[[T]]
// CHECK-NEXT: %[[DW:.*]] = md.softmax_grad %[[DP]], %[[P]] axis 0 {md.backward, md.unit = 0 : i64} : tensor<2x4xf32>
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DW]] :

// CHECK-LABEL: md.model @attention
md.model @attention {
  md.param @qkv : tensor<24x8xf32> init <zeros>
  md.forward @forward(%x: tensor<2x4x8xf32>) -> tensor<f32> {
    %w = md.param_ref @qkv : tensor<24x8xf32>
    %h = md.matmul %x, %w transpose_b : tensor<2x4x8xf32>, tensor<24x8xf32> -> tensor<2x4x24xf32>
    %r = md.reshape %h : tensor<2x4x24xf32> to tensor<2x4x3x8xf32>
    %t = md.transpose %r perm [2, 0, 1, 3] : tensor<2x4x3x8xf32> to tensor<3x2x4x8xf32>
    %q = md.sum %t dims [0] : tensor<3x2x4x8xf32> to tensor<2x4x8xf32>
    %o = md.causal_attention %q, %q, %x num_heads 2 : tensor<2x4x8xf32>
    %l = md.mean %o dims [0, 1, 2] : tensor<2x4x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// q and k are the same value: their gradients are summed; v is data. The
// transpose goes back by the inverse permutation, the reshape to the shape
// it came from.
// CHECK: md.func @forward.grad(%[[X:[^:]*]]: tensor<2x4x8xf32>
// CHECK:      %[[Q:.*]] = md.sum %{{.*}} dims [0]
// CHECK:      %[[DO:.*]] = md.mean_grad
// CHECK-NEXT: %[[DQ:.*]], %[[DK:.*]], %{{.*}} = md.causal_attention_grad %[[DO]], %[[Q]], %[[Q]], %[[X]] num_heads 2 {md.backward, md.unit = 0 : i64} : tensor<2x4x8xf32>
// CHECK-NEXT: %[[DSUM:.*]] = md.add %[[DQ]], %[[DK]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT: %[[DT:.*]] = md.sum_grad %[[DSUM]] dims [0] {md.backward, md.unit = 0 : i64} : tensor<2x4x8xf32> to tensor<3x2x4x8xf32>
// CHECK-NEXT: %[[DR:.*]] = md.transpose %[[DT]] perm [1, 2, 0, 3] {md.backward, md.unit = 0 : i64} : tensor<3x2x4x8xf32> to tensor<2x4x3x8xf32>
// CHECK-NEXT: %[[DH:.*]] = md.reshape %[[DR]] {md.backward, md.unit = 0 : i64} : tensor<2x4x3x8xf32> to tensor<2x4x24xf32>
// CHECK-NEXT: %{{.*}}, %[[DW:.*]] = md.matmul_grad %[[DH]], %[[X]], %{{.*}} transpose_b
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DW]] :

// sqrt and rsqrt compose forward ops: d sqrt(x) = 0.5 dy rsqrt(x),
// d rsqrt(x + eps) = -0.5 dy y^3 with y the forward's output.
// CHECK-LABEL: md.model @sqrt_rsqrt
md.model @sqrt_rsqrt {
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward() -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %s = md.sqrt %w : tensor<4xf32>
    %r = md.rsqrt %s eps 2.500000e-01 : tensor<4xf32>
    %l = md.sum %r dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK: md.func @forward.grad
// CHECK:      %[[W:.*]] = md.param_ref @w
// CHECK-NEXT: %[[S:.*]] = md.sqrt %[[W]]
// CHECK-NEXT: %[[R:.*]] = md.rsqrt %[[S]] eps 2.500000e-01
// CHECK:      %[[DR:.*]] = md.sum_grad
// CHECK-NEXT: %[[R2:.*]] = md.mul %[[R]], %[[R]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT: %[[R3:.*]] = md.mul %[[R2]], %[[R]]
// CHECK-NEXT: %[[T:.*]] = md.mul %[[DR]], %[[R3]]
// CHECK-NEXT: %[[DS:.*]] = md.scale %[[T]] by -5.000000e-01 {md.backward, md.unit = 0 : i64}
// CHECK-NEXT: %[[RW:.*]] = md.rsqrt %[[W]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT: %[[U:.*]] = md.mul %[[DS]], %[[RW]]
// CHECK-NEXT: %[[DW:.*]] = md.scale %[[U]] by 5.000000e-01 {md.backward, md.unit = 0 : i64}
// CHECK-NEXT: md.return {{.*}} %{{.*}}, %[[DW]] :

//===----------------------------------------------------------------------===//
// Collectives (md-sync-batch-norm's statistics)
//===----------------------------------------------------------------------===//

// The gradient of an all-reduce (sum or avg) is the same all-reduce of the
// cotangent, with the forward one's tags.
// CHECK-LABEL: md.model @all_reduce
md.model @all_reduce {
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward(%x: tensor<8x4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %h = md.mul %x, %w : tensor<8x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
    %m = md.mean %h dims [0] : tensor<8x4xf32> to tensor<4xf32>
    %a = md.all_reduce %m avg group world {md.sync_batch_norm} : tensor<4xf32>
    %s = md.all_reduce %a sum group shard : tensor<4xf32>
    %l = md.sum %s dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK: md.func @forward.grad
// CHECK:      %[[DS:.*]] = md.sum_grad
// CHECK-NEXT: %[[DA:.*]] = md.all_reduce %[[DS]] sum group shard {md.backward, md.unit = 0 : i64} : tensor<4xf32>
// CHECK-NEXT: %[[DM:.*]] = md.all_reduce %[[DA]] avg group world {md.backward, md.sync_batch_norm, md.unit = 0 : i64} : tensor<4xf32>
// CHECK-NEXT: md.mean_grad %[[DM]] dims [0]

//===----------------------------------------------------------------------===//
// Embedding, tied weights, values that need no gradient
//===----------------------------------------------------------------------===//

// wte is read twice, by the lookup and (transposed) by the output head: its
// gradient is the sum of both, built right after the last contribution.
// wpe is looked up with md.arange: the integer positions get no gradient.
// CHECK-LABEL: md.model @tied_embedding
md.model @tied_embedding {
  md.param @wte.weight : tensor<16x4xf32> init <zeros>
  md.param @wpe.weight : tensor<3x4xf32> init <zeros>
  md.forward @forward(%idx: tensor<2x3xi32>, %y: tensor<2x3xi32>) -> tensor<f32> {
    %wte = md.param_ref @wte.weight : tensor<16x4xf32>
    %e = md.embedding %wte, %idx : tensor<16x4xf32>, tensor<2x3xi32> -> tensor<2x3x4xf32>
    %pos = md.arange 0 to 3 : tensor<3xi64>
    %wpe = md.param_ref @wpe.weight : tensor<3x4xf32>
    %p = md.embedding %wpe, %pos : tensor<3x4xf32>, tensor<3xi64> -> tensor<3x4xf32>
    %x = md.add %e, %p : tensor<2x3x4xf32>, tensor<3x4xf32> -> tensor<2x3x4xf32>
    %wte2 = md.param_ref @wte.weight : tensor<16x4xf32>
    %wt = md.transpose %wte2 perm [1, 0] : tensor<16x4xf32> to tensor<4x16xf32>
    %logits = md.matmul %x, %wt : tensor<2x3x4xf32>, tensor<4x16xf32> -> tensor<2x3x16xf32>
    %l = md.cross_entropy %logits, %y : tensor<2x3x16xf32>, tensor<2x3xi32> -> tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK: md.func @forward.grad(%[[IDX:[^:]*]]: tensor<2x3xi32>, %[[Y:[^:]*]]: tensor<2x3xi32>, %[[DLOSS:[^:]*]]: tensor<f32>) -> (tensor<f32>, tensor<16x4xf32> {md.grad_of = @wte.weight}, tensor<3x4xf32> {md.grad_of = @wpe.weight})
// CHECK:      %[[POS:.*]] = md.arange 0 to 3 {md.unit = 0 : i64}
// CHECK:      %[[DLOGITS:.*]] = md.cross_entropy_grad %[[DLOSS]]
// CHECK-NEXT: %[[DX:.*]], %[[DWT:.*]] = md.matmul_grad %[[DLOGITS]]
// CHECK-NEXT: %[[DWTE2:.*]] = md.transpose %[[DWT]] perm [1, 0] {md.backward, md.unit = 0 : i64} : tensor<4x16xf32> to tensor<16x4xf32>
// CHECK-NEXT: %[[DP:.*]] = md.sum_to %[[DX]] {{.*}}: tensor<2x3x4xf32> to tensor<3x4xf32>
// CHECK-NEXT: %[[DWPE:.*]] = md.embedding_grad %[[DP]], %[[POS]] num_embeddings 3 {md.backward, md.unit = 0 : i64} : tensor<3x4xf32>, tensor<3xi64> -> tensor<3x4xf32>
// CHECK-NEXT: %[[DWTE1:.*]] = md.embedding_grad %[[DX]], %[[IDX]] num_embeddings 16 {md.backward, md.unit = 0 : i64} : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<16x4xf32>
// CHECK-NEXT: %[[DWTE:.*]] = md.add %[[DWTE2]], %[[DWTE1]] {md.backward, md.unit = 0 : i64} : tensor<16x4xf32>, tensor<16x4xf32> -> tensor<16x4xf32>
// CHECK-NEXT: md.return {md.unit = 0 : i64} %{{.*}}, %[[DWTE]], %[[DWPE]] :

// Frozen parameters get no gradient and no result; ops that depend on no
// trainable parameter (preprocessing of the data) get no
// backward op; extra forward results are returned but not differentiated.
// CHECK-LABEL: md.model @frozen_and_inactive
md.model @frozen_and_inactive {
  md.param @emb : tensor<8x4xf32> init <zeros> frozen
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward(%ids: tensor<2xi32>, %x: tensor<2x4xf32>) -> (tensor<f32>, tensor<2x4xf32>) {
    %emb = md.param_ref @emb : tensor<8x4xf32>
    %e = md.embedding %emb, %ids : tensor<8x4xf32>, tensor<2xi32> -> tensor<2x4xf32>
    %s = md.sqrt %x : tensor<2x4xf32>
    %d = md.add %e, %s : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
    %w = md.param_ref @w : tensor<4xf32>
    %h = md.mul %d, %w : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %l = md.sum %h dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l, %d : tensor<f32>, tensor<2x4xf32>
  }
}
// CHECK:      md.func @forward.grad(%{{[^:]*}}: tensor<2xi32>, %{{[^:]*}}: tensor<2x4xf32>, %{{[^:]*}}: tensor<f32>) -> (tensor<f32>, tensor<2x4xf32>, tensor<4xf32> {md.grad_of = @w})
// CHECK:      %[[D:.*]] = md.add
// CHECK:      %[[L:.*]] = md.sum
// CHECK-NEXT: %[[DH:.*]] = md.sum_grad
// CHECK-NEXT: %[[M:.*]] = md.mul %[[DH]], %[[D]]
// CHECK-NEXT: %[[DW:.*]] = md.sum_to %[[M]] {{.*}}: tensor<2x4xf32> to tensor<4xf32>
// CHECK-NEXT: md.return {md.unit = 0 : i64} %[[L]], %[[D]], %[[DW]] : tensor<f32>, tensor<2x4xf32>, tensor<4xf32>

// Constants get no gradient; an op without results (md.print) is cloned
// into the forward part and has nothing to differentiate.
// CHECK-LABEL: md.model @constants_and_effects
md.model @constants_and_effects {
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward() -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %c = arith.constant dense<2.0> : tensor<4xf32>
    %h = md.mul %c, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    md.print "h"(%h : tensor<4xf32>)
    %l = md.sum %h dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK:      md.func @forward.grad
// CHECK:      %[[C:.*]] = arith.constant {md.unit = 0 : i64} dense<2.000000e+00> : tensor<4xf32>
// CHECK:      md.print "h"(%{{.*}} : tensor<4xf32>) {md.unit = 0 : i64}
// CHECK-NEXT: %[[L:.*]] = md.sum
// CHECK-NEXT: %[[DH:.*]] = md.sum_grad
// CHECK-NEXT: %[[DW:.*]] = md.mul %[[DH]], %[[C]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT: md.return {md.unit = 0 : i64} %[[L]], %[[DW]] :

//===----------------------------------------------------------------------===//
// Inlined blocks and units
//===----------------------------------------------------------------------===//

// @Layer gets unit 1's parameters, so its ops, their backward ops and the
// param_refs are unit 1; @Scale, called from @Layer with no parameter,
// computes for unit 1 too; @Mix gets parameters of units 1 and 2, so its ops
// are unit 0, the root unit, like the forward's own ops.
// CHECK-LABEL: md.model @blocks
md.model @blocks {
  md.param @l.w : tensor<4x4xf32> init <zeros> unit 1
  md.param @l.b : tensor<4xf32> init <zeros> unit 1
  md.param @m.a : tensor<4xf32> init <ones> unit 1
  md.param @m.b : tensor<4xf32> init <ones> unit 2
  md.func @Scale(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %h = md.scale %x by 2.0 : tensor<2x4xf32>
    md.return %h : tensor<2x4xf32>
  }
  md.func @Layer(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>, %b: tensor<4xf32>) -> tensor<2x4xf32> {
    %h = md.matmul %x, %w bias %b transpose_b : tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %s = md.call @Scale(%h) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %r = md.relu %s : tensor<2x4xf32>
    md.return %r : tensor<2x4xf32>
  }
  md.func @Mix(%x: tensor<2x4xf32>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<2x4xf32> {
    %h = md.mul %x, %a : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %k = md.mul %h, %b : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    md.return %k : tensor<2x4xf32>
  }
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %w = md.param_ref @l.w : tensor<4x4xf32>
    %b = md.param_ref @l.b : tensor<4xf32>
    %h = md.call @Layer(%x, %w, %b) : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %a = md.param_ref @m.a : tensor<4xf32>
    %c = md.param_ref @m.b : tensor<4xf32>
    %k = md.call @Mix(%h, %a, %c) : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %l = md.mean %k dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// The forward still calls the blocks.
// CHECK:      md.forward @forward
// CHECK:        md.call @Layer
// CHECK:        md.call @Mix
// CHECK:      md.func @forward.grad(%[[X:[^:]*]]: tensor<2x4xf32>, %[[DLOSS:[^:]*]]: tensor<f32>)
// CHECK-NOT:    md.call
// CHECK-NEXT:   %[[W:.*]] = md.param_ref @l.w {md.unit = 1 : i64}
// CHECK-NEXT:   %[[B:.*]] = md.param_ref @l.b {md.unit = 1 : i64}
// CHECK-NEXT:   %[[H:.*]] = md.matmul %[[X]], %[[W]] bias %[[B]] transpose_b {md.unit = 1 : i64}
// CHECK-NEXT:   %[[S:.*]] = md.scale %[[H]] by 2.000000e+00 {md.unit = 1 : i64}
// CHECK-NEXT:   %[[R:.*]] = md.relu %[[S]] {md.unit = 1 : i64}
// CHECK-NEXT:   %[[A:.*]] = md.param_ref @m.a {md.unit = 1 : i64}
// CHECK-NEXT:   %[[C:.*]] = md.param_ref @m.b {md.unit = 2 : i64}
// CHECK-NEXT:   %[[MH:.*]] = md.mul %[[R]], %[[A]] {md.unit = 0 : i64}
// CHECK-NEXT:   %[[MK:.*]] = md.mul %[[MH]], %[[C]] {md.unit = 0 : i64}
// CHECK-NEXT:   %[[L:.*]] = md.mean %[[MK]] dims [0, 1] {md.unit = 0 : i64}
// CHECK-NEXT:   %[[DK:.*]] = md.mean_grad %[[DLOSS]] {{.*}} {md.backward, md.unit = 0 : i64}
// CHECK-NEXT:   %[[DMH:.*]] = md.mul %[[DK]], %[[C]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT:   %[[T1:.*]] = md.mul %[[DK]], %[[MH]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT:   %[[DC:.*]] = md.sum_to %[[T1]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT:   %[[DR:.*]] = md.mul %[[DMH]], %[[A]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT:   %[[T2:.*]] = md.mul %[[DMH]], %[[R]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT:   %[[DA:.*]] = md.sum_to %[[T2]] {md.backward, md.unit = 0 : i64}
// CHECK-NEXT:   %[[DS:.*]] = md.relu_grad %[[DR]], %[[S]] {md.backward, md.unit = 1 : i64}
// CHECK-NEXT:   %[[DH:.*]] = md.scale %[[DS]] by 2.000000e+00 {md.backward, md.unit = 1 : i64}
// CHECK-NEXT:   %{{.*}}, %[[DW:.*]], %[[DB:.*]] = md.matmul_grad %[[DH]], %[[X]], %[[W]] transpose_b has_bias {md.backward, md.unit = 1 : i64}
// CHECK-NEXT:   md.return {md.unit = 0 : i64} %[[L]], %[[DW]], %[[DB]], %[[DA]], %[[DC]] :
// CHECK-NEXT: }

// The same block called twice with the parameters of two units: each copy
// is tagged with its own unit.
// CHECK-LABEL: md.model @repeated_block
md.model @repeated_block {
  md.param @h.0.w : tensor<4xf32> init <ones> unit 1
  md.param @h.1.w : tensor<4xf32> init <ones> unit 2
  md.func @Block(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
    %h = md.mul %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    md.return %h : tensor<4xf32>
  }
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %w0 = md.param_ref @h.0.w : tensor<4xf32>
    %h0 = md.call @Block(%x, %w0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %w1 = md.param_ref @h.1.w : tensor<4xf32>
    %h1 = md.call @Block(%h0, %w1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %l = md.sum %h1 dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK:      md.func @forward.grad
// CHECK:        md.mul %{{.*}}, %{{.*}} {md.unit = 1 : i64}
// CHECK:        md.mul %{{.*}}, %{{.*}} {md.unit = 2 : i64}
// CHECK:        md.sum_grad {{.*}} {md.backward, md.unit = 0 : i64}
// CHECK-NEXT:   md.mul {{.*}} {md.backward, md.unit = 2 : i64}
// CHECK-NEXT:   md.mul {{.*}} {md.backward, md.unit = 2 : i64}
// CHECK-NEXT:   md.mul {{.*}} {md.backward, md.unit = 1 : i64}
// CHECK-NEXT:   md.return
