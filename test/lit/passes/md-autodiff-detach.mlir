// RUN: md-opt %s --md-autodiff | FileCheck %s
// RUN: md-opt %s --md-autodiff | md-opt | FileCheck %s

// md.detach stops the gradient: l = sum(w * detach(w)) has dl/dw = detach(w)
// (one product, not 2w), and md-autodiff leaves no md.detach behind, in the
// forward or the gradient function.

// CHECK-LABEL: md.model @detached
md.model @detached {
  md.param @w : tensor<4xf32> init <zeros>
  md.forward @forward() -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %d = md.detach %w : tensor<4xf32>
    %p = md.mul %w, %d : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    %l = md.sum %p dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
// CHECK-NOT:  md.detach
// CHECK:      md.func @forward.grad(%[[DLOSS:.*]]: tensor<f32>)
// CHECK-NEXT:   %[[W:.*]] = md.param_ref @w
// CHECK-NEXT:   %[[P:.*]] = md.mul %[[W]], %[[W]]
// CHECK-NEXT:   md.sum %[[P]]
// CHECK-NEXT:   %[[DP:.*]] = md.sum_grad %[[DLOSS]]
// The product's rule gives w the gradient dp * detach(w) = dp * w, and the
// detached operand none (no gradient is computed for it): one md.mul and
// no md.add of two terms.
// CHECK-NEXT:   %[[DW:.*]] = md.mul %[[DP]], %[[W]]
// CHECK-NEXT:   md.return {{.*}}, %[[DW]]
// CHECK-NOT:  md.detach
