// RUN: md-opt %s -split-input-file -verify-diagnostics --md-autodiff

// A trainable parameter nothing reads gets no gradient.
md.model @param_never_read {
  md.param @fc.weight : tensor<4x8xf32> init <zeros>
  // expected-error @+1 {{parameter 'fc3.weight' does not affect the loss of @forward: it would get no gradient (mark it frozen or remove it)}}
  md.param @fc3.weight : tensor<4x4xf32> init <zeros>
  md.forward @forward(%x: tensor<2x8xf32>, %y: tensor<2xi32>) -> tensor<f32> {
    %w = md.param_ref @fc.weight : tensor<4x8xf32>
    %h = md.matmul %x, %w transpose_b : tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x4xf32>
    %l = md.cross_entropy %h, %y : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

// A parameter read only for an extra result: the loss does not depend on it.
md.model @param_not_on_loss_path {
  md.param @fc.weight : tensor<4x8xf32> init <zeros>
  // expected-error @+1 {{parameter 'aux.weight' does not affect the loss of @forward}}
  md.param @aux.weight : tensor<4x8xf32> init <zeros>
  md.forward @forward(%x: tensor<2x8xf32>, %y: tensor<2xi32>) -> (tensor<f32>, tensor<2x4xf32>) {
    %w = md.param_ref @fc.weight : tensor<4x8xf32>
    %h = md.matmul %x, %w transpose_b : tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x4xf32>
    %l = md.cross_entropy %h, %y : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>
    // expected-note @+1 {{it is read here, but the loss does not depend on it}}
    %a = md.param_ref @aux.weight : tensor<4x8xf32>
    %b = md.matmul %x, %a transpose_b : tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x4xf32>
    md.return %l, %b : tensor<f32>, tensor<2x4xf32>
  }
}

// -----

// Every unused parameter is reported, not only the first; frozen ones are
// not.
md.model @params_unused_all_reported {
  // expected-error @+1 {{parameter 'a' does not affect the loss}}
  md.param @a : tensor<4xf32> init <zeros>
  md.param @frozen : tensor<4xf32> init <zeros> frozen
  // expected-error @+1 {{parameter 'b' does not affect the loss}}
  md.param @b : tensor<4xf32> init <zeros>
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

// md.accumulate has no rule; the error names it.
md.model @op_without_rule {
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %h = md.mul %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    // expected-error @+1 {{'md.accumulate' op has no gradient rule, and the loss depends on a parameter through it}}
    %s = md.accumulate %h, %x : tensor<4xf32>, tensor<4xf32>
    %l = md.sum %s dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

// The error points into the block the op was inlined from.
md.model @op_without_rule_in_block {
  md.param @w : tensor<4xf32> init <ones> unit 1
  md.func @Block(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
    %h = md.mul %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    // expected-error @+1 {{'md.accumulate' op has no gradient rule}}
    %s = md.accumulate %h, %x : tensor<4xf32>, tensor<4xf32>
    md.return %s : tensor<4xf32>
  }
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %h = md.call @Block(%x, %w) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %l = md.sum %h dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

// Gradient ops in a forward have no rule of their own.
md.model @grad_op_in_forward {
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    // expected-error @+1 {{'md.relu_grad' op has no gradient rule}}
    %g = md.relu_grad %w, %x : tensor<4xf32>
    %l = md.sum %g dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

// An all-reduce is differentiated for sum and avg only.
md.model @all_reduce_max {
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %h = md.mul %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    // expected-error @+1 {{'md.all_reduce' op has no gradient rule for reduction 'max': md-autodiff differentiates sum and avg all-reduces only}}
    %m = md.all_reduce %h max group world : tensor<4xf32>
    %l = md.sum %m dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

// md.batch_norm is differentiated through y; a loss that reads its batch
// statistics has no rule.
md.model @batch_norm_statistics_in_loss {
  md.param @g : tensor<4xf32> init <ones>
  md.param @b : tensor<4xf32> init <zeros>
  md.forward @forward(%x: tensor<8x4xf32>) -> tensor<f32> {
    %g = md.param_ref @g : tensor<4xf32>
    %b = md.param_ref @b : tensor<4xf32>
    // expected-error @+1 {{'md.batch_norm' op the loss depends on the batch statistics (mean, invstd) it returns; md-autodiff differentiates md.batch_norm through y only}}
    %y, %mean, %invstd = md.batch_norm %x, %g, %b : tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32>
    %s = md.mul %y, %mean : tensor<8x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
    %l = md.mean %s dims [0, 1] : tensor<8x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

// expected-error @+1 {{'md.model' op has no 'md.forward' to differentiate}}
md.model @no_forward {
  md.param @w : tensor<4xf32> init <ones>
}

// -----

md.model @grad_already_defined {
  md.param @w : tensor<4xf32> init <ones>
  // expected-error @+1 {{'md.forward' op cannot add @forward.grad: the model already has it}}
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %h = md.mul %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    %l = md.sum %h dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-note @+1 {{@forward.grad is defined here}}
  md.func @forward.grad(%x: tensor<4xf32>) -> tensor<4xf32> {
    md.return %x : tensor<4xf32>
  }
}

// -----

md.model @call_recursive {
  md.param @w : tensor<4xf32> init <ones>
  // expected-note @+1 {{'Loop' is defined here}}
  md.func @Loop(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'md.call' op calls 'Loop' recursively; md-autodiff inlines every call and cannot inline a recursion}}
    %y = md.call @Loop(%x) : (tensor<4xf32>) -> tensor<4xf32>
    md.return %y : tensor<4xf32>
  }
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %h = md.mul %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    %y = md.call @Loop(%h) : (tensor<4xf32>) -> tensor<4xf32>
    %l = md.sum %y dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

// Control flow is not differentiated: an md.if between a parameter and the
// loss has no rule.
md.model @if_on_loss_path {
  md.param @w : tensor<4xf32> init <ones>
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %c = arith.constant true
    // expected-error @+1 {{'md.if' op has no gradient rule}}
    %h = md.if %c -> (tensor<4xf32>) {
      md.yield %w : tensor<4xf32>
    } else {
      md.yield %x : tensor<4xf32>
    }
    %l = md.sum %h dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

md.model @call_in_region {
  md.param @w : tensor<4xf32> init <ones>
  md.func @Id(%x: tensor<4xf32>) -> tensor<4xf32> {
    md.return %x : tensor<4xf32>
  }
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    %c = arith.constant true
    %h = md.if %c -> (tensor<4xf32>) {
      // expected-error @+1 {{'md.call' op is nested in a region; md-autodiff inlines calls in the body of a function only}}
      %y = md.call @Id(%w) : (tensor<4xf32>) -> tensor<4xf32>
      md.yield %y : tensor<4xf32>
    } else {
      md.yield %x : tensor<4xf32>
    }
    %l = md.sum %h dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}
