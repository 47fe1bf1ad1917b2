// RUN: md-opt %s | md-opt | FileCheck %s

// Round trip of every compute op and of each of its optional forms.

// CHECK-LABEL: func.func @matmul
func.func @matmul(%x: tensor<8x768xf32>, %w: tensor<3072x768xf32>, %b: tensor<3072xf32>,
                  %wt: tensor<768x3072xf32>, %xt: tensor<768x8xf32>,
                  %q: tensor<4x64x32xbf16>, %k: tensor<4x64x32xbf16>, %d: tensor<?x768xf32>) {
  // CHECK: md.matmul %{{.*}}, %{{.*}} bias %{{.*}} transpose_b : tensor<8x768xf32>, tensor<3072x768xf32>, tensor<3072xf32> -> tensor<8x3072xf32>
  %0 = md.matmul %x, %w bias %b transpose_b : tensor<8x768xf32>, tensor<3072x768xf32>, tensor<3072xf32> -> tensor<8x3072xf32>
  // CHECK: md.matmul %{{.*}}, %{{.*}} : tensor<8x768xf32>, tensor<768x3072xf32> -> tensor<8x3072xf32>
  %1 = md.matmul %x, %wt : tensor<8x768xf32>, tensor<768x3072xf32> -> tensor<8x3072xf32>
  // CHECK: md.matmul %{{.*}}, %{{.*}} transpose_a : tensor<768x8xf32>, tensor<768x3072xf32> -> tensor<8x3072xf32>
  %2 = md.matmul %xt, %wt transpose_a : tensor<768x8xf32>, tensor<768x3072xf32> -> tensor<8x3072xf32>
  // CHECK: md.matmul %{{.*}}, %{{.*}} transpose_a transpose_b : tensor<768x8xf32>, tensor<3072x768xf32> -> tensor<8x3072xf32>
  %3 = md.matmul %xt, %w transpose_a transpose_b : tensor<768x8xf32>, tensor<3072x768xf32> -> tensor<8x3072xf32>
  // CHECK: md.matmul %{{.*}}, %{{.*}} transpose_b : tensor<4x64x32xbf16>, tensor<4x64x32xbf16> -> tensor<4x64x64xbf16>
  %4 = md.matmul %q, %k transpose_b : tensor<4x64x32xbf16>, tensor<4x64x32xbf16> -> tensor<4x64x64xbf16>
  // CHECK: md.matmul %{{.*}}, %{{.*}} bias %{{.*}} : tensor<?x768xf32>, tensor<768x3072xf32>, tensor<3072xf32> -> tensor<?x3072xf32>
  %5 = md.matmul %d, %wt bias %b : tensor<?x768xf32>, tensor<768x3072xf32>, tensor<3072xf32> -> tensor<?x3072xf32>
  return
}

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%x: tensor<8x64x768xf32>, %p: tensor<64x768xf32>, %c: tensor<8x1x768xf32>) {
  // CHECK: md.add %{{.*}}, %{{.*}} : tensor<8x64x768xf32>, tensor<64x768xf32> -> tensor<8x64x768xf32>
  %0 = md.add %x, %p : tensor<8x64x768xf32>, tensor<64x768xf32> -> tensor<8x64x768xf32>
  // CHECK: md.sub %{{.*}}, %{{.*}} : tensor<8x1x768xf32>, tensor<64x768xf32> -> tensor<8x64x768xf32>
  %1 = md.sub %c, %p : tensor<8x1x768xf32>, tensor<64x768xf32> -> tensor<8x64x768xf32>
  // CHECK: md.mul %{{.*}}, %{{.*}} : tensor<8x64x768xf32>, tensor<8x64x768xf32> -> tensor<8x64x768xf32>
  %2 = md.mul %x, %x : tensor<8x64x768xf32>, tensor<8x64x768xf32> -> tensor<8x64x768xf32>
  // CHECK: md.div %{{.*}}, %{{.*}} : tensor<8x64x768xf32>, tensor<8x64x768xf32> -> tensor<8x64x768xf32>
  %div = md.div %x, %x : tensor<8x64x768xf32>, tensor<8x64x768xf32> -> tensor<8x64x768xf32>
  // CHECK: md.maximum %{{.*}}, %{{.*}} : tensor<8x64x768xf32>, tensor<64x768xf32> -> tensor<8x64x768xf32>
  %max = md.maximum %x, %p : tensor<8x64x768xf32>, tensor<64x768xf32> -> tensor<8x64x768xf32>
  // CHECK: md.minimum %{{.*}}, %{{.*}} : tensor<8x64x768xf32>, tensor<8x64x768xf32> -> tensor<8x64x768xf32>
  %min = md.minimum %x, %x : tensor<8x64x768xf32>, tensor<8x64x768xf32> -> tensor<8x64x768xf32>
  // CHECK: md.scale %{{.*}} by 5.000000e-01 : tensor<8x64x768xf32>
  %3 = md.scale %x by 0.5 : tensor<8x64x768xf32>
  // CHECK: md.gelu %{{.*}} : tensor<8x64x768xf32>
  %4 = md.gelu %x : tensor<8x64x768xf32>
  // CHECK: md.gelu %{{.*}} approximate : tensor<8x64x768xf32>
  %5 = md.gelu %x approximate : tensor<8x64x768xf32>
  // CHECK: md.relu %{{.*}} : tensor<8x64x768xf32>
  %6 = md.relu %x : tensor<8x64x768xf32>
  // CHECK: md.silu %{{.*}} : tensor<8x64x768xf32>
  %silu = md.silu %x : tensor<8x64x768xf32>
  // CHECK: md.elementwise exp %{{.*}} : tensor<8x64x768xf32>
  %exp = md.elementwise exp %x : tensor<8x64x768xf32>
  // CHECK: md.elementwise rsqrt %{{.*}} : tensor<8x64x768xf32>
  %rsqrt = md.elementwise rsqrt %x : tensor<8x64x768xf32>
  // CHECK: md.pow %{{.*}} by 2.5{{.*}} : tensor<8x64x768xf32>
  %pow = md.pow %x by 2.5 : tensor<8x64x768xf32>
  // CHECK: md.clamp %{{.*}} min -1.000000e+00 max 2.500000e-01 : tensor<8x64x768xf32>
  %clamp = md.clamp %x min -1.0 max 0.25 : tensor<8x64x768xf32>
  // CHECK: md.clamp %{{.*}} min 0.000000e+00 max 0x7FF0000000000000 : tensor<8x64x768xf32>
  %relu6 = md.clamp %x min 0.0 max 0x7FF0000000000000 : tensor<8x64x768xf32>
  // CHECK: md.clamp_grad %{{.*}}, %{{.*}} min -1.000000e+00 max 2.500000e-01 : tensor<8x64x768xf32>
  %dclamp = md.clamp_grad %x, %x min -1.0 max 0.25 : tensor<8x64x768xf32>
  // CHECK: md.accumulate %{{.*}}, %{{.*}} : tensor<64x768xf32>, tensor<64x768xbf16>
  %acc = arith.constant dense<0.0> : tensor<64x768xbf16>
  %7 = md.accumulate %p, %acc : tensor<64x768xf32>, tensor<64x768xbf16>
  return
}

// CHECK-LABEL: func.func @norms
func.func @norms(%x: tensor<8x64x768xf32>, %g: tensor<768xf32>, %b: tensor<768xf32>,
                 %img: tensor<8x16x16x32xf32>, %cg: tensor<32xf32>, %cb: tensor<32xf32>) {
  // CHECK: md.layer_norm %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x64x768xf32>, tensor<768xf32>, tensor<768xf32>
  %0 = md.layer_norm %x, %g, %b : tensor<8x64x768xf32>, tensor<768xf32>, tensor<768xf32>
  // CHECK: md.layer_norm %{{.*}}, %{{.*}} eps 9.9999999999999995E-7 : tensor<8x64x768xf32>, tensor<768xf32>
  %1 = md.layer_norm %x, %g eps 1.0e-6 : tensor<8x64x768xf32>, tensor<768xf32>
  // CHECK: md.rms_norm %{{.*}}, %{{.*}} : tensor<8x64x768xf32>, tensor<768xf32>
  %2 = md.rms_norm %x, %g : tensor<8x64x768xf32>, tensor<768xf32>
  // CHECK: md.rms_norm %{{.*}}, %{{.*}} eps 1.000000e-05 : tensor<8x64x768xf32>, tensor<768xf32>
  %3 = md.rms_norm %x, %g eps 1.0e-5 : tensor<8x64x768xf32>, tensor<768xf32>
  // CHECK: md.batch_norm %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>
  %4:3 = md.batch_norm %img, %cg, %cb : tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>
  // CHECK: md.batch_norm %{{.*}}, %{{.*}}, %{{.*}} eps 1.000000e-03 : tensor<8x16x16x32xf32>
  %5:3 = md.batch_norm %img, %cg, %cb eps 1.0e-3 : tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>
  // CHECK: md.softmax %{{.*}} : tensor<8x64x768xf32>
  %6 = md.softmax %x : tensor<8x64x768xf32>
  // CHECK: md.softmax %{{.*}} axis 0 : tensor<8x64x768xf32>
  %7 = md.softmax %x axis 0 : tensor<8x64x768xf32>
  // CHECK: md.softmax %{{.*}} axis -2 : tensor<8x64x768xf32>
  %8 = md.softmax %x axis -2 : tensor<8x64x768xf32>
  return
}

// CHECK-LABEL: func.func @attention_embedding_loss
func.func @attention_embedding_loss(%q: tensor<8x64x768xbf16>, %wte: tensor<50304x768xf32>,
                                    %ids: tensor<8x64xi32>, %ids64: tensor<8x64xi64>,
                                    %logits: tensor<8x64x50304xf32>) {
  // CHECK: md.causal_attention %{{.*}}, %{{.*}}, %{{.*}} num_heads 12 : tensor<8x64x768xbf16>
  %0 = md.causal_attention %q, %q, %q num_heads 12 : tensor<8x64x768xbf16>
  // CHECK: md.causal_attention %{{.*}}, %{{.*}}, %{{.*}} num_heads 12 window 16 : tensor<8x64x768xbf16>
  %w = md.causal_attention %q, %q, %q num_heads 12 window 16 : tensor<8x64x768xbf16>
  // CHECK: md.embedding %{{.*}}, %{{.*}} : tensor<50304x768xf32>, tensor<8x64xi32> -> tensor<8x64x768xf32>
  %1 = md.embedding %wte, %ids : tensor<50304x768xf32>, tensor<8x64xi32> -> tensor<8x64x768xf32>
  // CHECK: md.cross_entropy %{{.*}}, %{{.*}} : tensor<8x64x50304xf32>, tensor<8x64xi64> -> tensor<f32>
  %2 = md.cross_entropy %logits, %ids64 : tensor<8x64x50304xf32>, tensor<8x64xi64> -> tensor<f32>
  // CHECK: md.cross_entropy %{{.*}}, %{{.*}} ignore_index -100 : tensor<8x64x50304xf32>, tensor<8x64xi32> -> tensor<f32>
  %3 = md.cross_entropy %logits, %ids ignore_index -100 : tensor<8x64x50304xf32>, tensor<8x64xi32> -> tensor<f32>
  return
}

// CHECK-LABEL: func.func @shapes
func.func @shapes(%x: tensor<8x64x768xf32>, %ids: tensor<8x64xi32>) {
  // CHECK: md.reshape %{{.*}} : tensor<8x64x768xf32> to tensor<512x768xf32>
  %0 = md.reshape %x : tensor<8x64x768xf32> to tensor<512x768xf32>
  // CHECK: md.reshape %{{.*}} : tensor<8x64xi32> to tensor<512xi32>
  %1 = md.reshape %ids : tensor<8x64xi32> to tensor<512xi32>
  // CHECK: md.transpose %{{.*}} perm [1, 0, 2] : tensor<8x64x768xf32> to tensor<64x8x768xf32>
  %2 = md.transpose %x perm [1, 0, 2] : tensor<8x64x768xf32> to tensor<64x8x768xf32>
  // CHECK: md.arange 0 to 1024 : tensor<1024xi32>
  %3 = md.arange 0 to 1024 : tensor<1024xi32>
  // CHECK: md.arange -2 to 2 : tensor<4xi64>
  %4 = md.arange -2 to 2 : tensor<4xi64>
  return
}

// CHECK-LABEL: func.func @layout
func.func @layout(%x: tensor<8x64x128xf32>, %h: tensor<8x64x64xbf16>, %ids: tensor<8x64xi64>,
                  %k: tensor<8x64x2x1x32xf32>, %d: tensor<?x64x128xf32>) {
  // CHECK: md.slice %{{.*}} axis 2 start 32 step 1 : tensor<8x64x128xf32> to tensor<8x64x32xf32>
  %0 = md.slice %x axis 2 start 32 step 1 : tensor<8x64x128xf32> to tensor<8x64x32xf32>
  // CHECK: md.slice %{{.*}} axis 1 start 1 step 3 : tensor<8x64xi64> to tensor<8x21xi64>
  %1 = md.slice %ids axis 1 start 1 step 3 : tensor<8x64xi64> to tensor<8x21xi64>
  // CHECK: md.slice %{{.*}} axis 1 start 0 step 2 : tensor<?x64x128xf32> to tensor<?x32x128xf32>
  %2 = md.slice %d axis 1 start 0 step 2 : tensor<?x64x128xf32> to tensor<?x32x128xf32>
  // CHECK: md.slice_grad %{{.*}} axis 2 start 32 step 1 : tensor<8x64x32xf32> to tensor<8x64x128xf32>
  %3 = md.slice_grad %0 axis 2 start 32 step 1 : tensor<8x64x32xf32> to tensor<8x64x128xf32>
  // CHECK: md.concat %{{.*}}, %{{.*}} axis 2 : tensor<8x64x32xf32>, tensor<8x64x128xf32> to tensor<8x64x160xf32>
  %4 = md.concat %0, %x axis 2 : tensor<8x64x32xf32>, tensor<8x64x128xf32> to tensor<8x64x160xf32>
  // CHECK: md.concat %{{.*}}, %{{.*}}, %{{.*}} axis 0 : tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<8x64x64xbf16> to tensor<24x64x64xbf16>
  %5 = md.concat %h, %h, %h axis 0 : tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<8x64x64xbf16> to tensor<24x64x64xbf16>
  // CHECK: md.expand %{{.*}} : tensor<8x64x2x1x32xf32> to tensor<8x64x2x4x32xf32>
  %6 = md.expand %k : tensor<8x64x2x1x32xf32> to tensor<8x64x2x4x32xf32>
  // CHECK: md.expand %{{.*}} : tensor<8x64xi64> to tensor<3x8x64xi64>
  %7 = md.expand %ids : tensor<8x64xi64> to tensor<3x8x64xi64>
  return
}

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<8x64x768xf32>, %g: tensor<4x16x8xf32>) {
  // CHECK: md.sum %{{.*}} dims [0, 1] : tensor<8x64x768xf32> to tensor<768xf32>
  %0 = md.sum %x dims [0, 1] : tensor<8x64x768xf32> to tensor<768xf32>
  // CHECK: md.sum %{{.*}} dims [-1] keepdim : tensor<8x64x768xf32> to tensor<8x64x1xf32>
  %1 = md.sum %x dims [-1] keepdim : tensor<8x64x768xf32> to tensor<8x64x1xf32>
  // CHECK: md.mean %{{.*}} dims [0, 1, 2] : tensor<8x64x768xf32> to tensor<f32>
  %2 = md.mean %x dims [0, 1, 2] : tensor<8x64x768xf32> to tensor<f32>
  // CHECK: md.mean %{{.*}} dims [2] keepdim : tensor<8x64x768xf32> to tensor<8x64x1xf32>
  %3 = md.mean %x dims [2] keepdim : tensor<8x64x768xf32> to tensor<8x64x1xf32>
  // CHECK: md.sum_to %{{.*}} : tensor<4x16x8xf32> to tensor<16x8xf32>
  %4 = md.sum_to %g : tensor<4x16x8xf32> to tensor<16x8xf32>
  // CHECK: md.sum_to %{{.*}} : tensor<4x16x8xf32> to tensor<4x1x8xf32>
  %5 = md.sum_to %g : tensor<4x16x8xf32> to tensor<4x1x8xf32>
  return
}

// CHECK-LABEL: func.func @grads
func.func @grads(%dy: tensor<8x3072xf32>, %x: tensor<8x768xf32>, %w: tensor<3072x768xf32>,
                 %wt: tensor<768x3072xf32>, %g: tensor<768xf32>, %dx: tensor<8x768xf32>) {
  // CHECK: md.matmul_grad %{{.*}}, %{{.*}}, %{{.*}} transpose_b has_bias : tensor<8x3072xf32>, tensor<8x768xf32>, tensor<3072x768xf32> -> tensor<8x768xf32>, tensor<3072x768xf32>, tensor<3072xf32>
  %0:3 = md.matmul_grad %dy, %x, %w transpose_b has_bias : tensor<8x3072xf32>, tensor<8x768xf32>, tensor<3072x768xf32> -> tensor<8x768xf32>, tensor<3072x768xf32>, tensor<3072xf32>
  // CHECK: md.matmul_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x3072xf32>, tensor<8x768xf32>, tensor<768x3072xf32> -> tensor<8x768xf32>, tensor<768x3072xf32>
  %1:2 = md.matmul_grad %dy, %x, %wt : tensor<8x3072xf32>, tensor<8x768xf32>, tensor<768x3072xf32> -> tensor<8x768xf32>, tensor<768x3072xf32>
  // CHECK: md.matmul_grad %{{.*}}, %{{.*}}, %{{.*}} transpose_a : tensor<768x3072xf32>, tensor<8x768xf32>, tensor<8x3072xf32> -> tensor<8x768xf32>, tensor<8x3072xf32>
  %2:2 = md.matmul_grad %wt, %x, %dy transpose_a : tensor<768x3072xf32>, tensor<8x768xf32>, tensor<8x3072xf32> -> tensor<8x768xf32>, tensor<8x3072xf32>
  // CHECK: md.gelu_grad %{{.*}}, %{{.*}} : tensor<8x768xf32>
  %3 = md.gelu_grad %dx, %x : tensor<8x768xf32>
  // CHECK: md.gelu_grad %{{.*}}, %{{.*}} approximate : tensor<8x768xf32>
  %4 = md.gelu_grad %dx, %x approximate : tensor<8x768xf32>
  // CHECK: md.relu_grad %{{.*}}, %{{.*}} : tensor<8x768xf32>
  %5 = md.relu_grad %dx, %x : tensor<8x768xf32>
  // CHECK: md.silu_grad %{{.*}}, %{{.*}} : tensor<8x768xf32>
  %silu_grad = md.silu_grad %dx, %x : tensor<8x768xf32>
  // CHECK: md.elementwise_grad sigmoid %{{.*}}, %{{.*}} : tensor<8x768xf32>
  %sigmoid_grad = md.elementwise_grad sigmoid %dx, %x : tensor<8x768xf32>
  // CHECK: md.pow_grad %{{.*}}, %{{.*}} by 3.0{{.*}} : tensor<8x768xf32>
  %pow_grad = md.pow_grad %dx, %x by 3.0 : tensor<8x768xf32>
  // CHECK: md.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} has_beta : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>, tensor<768xf32>
  %6:3 = md.layer_norm_grad %dx, %x, %g has_beta : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>, tensor<768xf32>
  // CHECK: md.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} eps 9.9999999999999995E-7 : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>
  %7:2 = md.layer_norm_grad %dx, %x, %g eps 1.0e-6 : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>
  // CHECK: md.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>
  %8:2 = md.rms_norm_grad %dx, %x, %g : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>
  // CHECK: md.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} eps 1.000000e-05 : tensor<8x768xf32>
  %9:2 = md.rms_norm_grad %dx, %x, %g eps 1.0e-5 : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>
  // CHECK: md.softmax_grad %{{.*}}, %{{.*}} : tensor<8x768xf32>
  %10 = md.softmax_grad %dx, %x : tensor<8x768xf32>
  // CHECK: md.softmax_grad %{{.*}}, %{{.*}} axis 0 : tensor<8x768xf32>
  %11 = md.softmax_grad %dx, %x axis 0 : tensor<8x768xf32>
  return
}

// CHECK-LABEL: func.func @grads_more
func.func @grads_more(%dy: tensor<8x16x16x32xf32>, %img: tensor<8x16x16x32xf32>, %cg: tensor<32xf32>,
                      %mean: tensor<32xf32>, %invstd: tensor<32xf32>, %q: tensor<8x64x768xf32>,
                      %ids: tensor<8x64xi32>, %dloss: tensor<f32>, %logits: tensor<8x64x50304xf32>,
                      %s: tensor<768xf32>, %sk: tensor<8x64x1xf32>) {
  // CHECK: md.batch_norm_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x16x16x32xf32>, tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>
  %0:3 = md.batch_norm_grad %dy, %img, %cg, %mean, %invstd : tensor<8x16x16x32xf32>, tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x16x16x32xf32>, tensor<32xf32>, tensor<32xf32>
  // CHECK: md.causal_attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} num_heads 12 : tensor<8x64x768xf32>
  %1:3 = md.causal_attention_grad %q, %q, %q, %q num_heads 12 : tensor<8x64x768xf32>
  // CHECK: md.causal_attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} num_heads 12 window 3 : tensor<8x64x768xf32>
  %w:3 = md.causal_attention_grad %q, %q, %q, %q num_heads 12 window 3 : tensor<8x64x768xf32>
  // CHECK: md.embedding_grad %{{.*}}, %{{.*}} num_embeddings 50304 : tensor<8x64x768xf32>, tensor<8x64xi32> -> tensor<50304x768xf32>
  %2 = md.embedding_grad %q, %ids num_embeddings 50304 : tensor<8x64x768xf32>, tensor<8x64xi32> -> tensor<50304x768xf32>
  // CHECK: md.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<f32>, tensor<8x64x50304xf32>, tensor<8x64xi32>
  %3 = md.cross_entropy_grad %dloss, %logits, %ids : tensor<f32>, tensor<8x64x50304xf32>, tensor<8x64xi32>
  // CHECK: md.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} ignore_index -100 : tensor<f32>, tensor<8x64x50304xf32>, tensor<8x64xi32>
  %4 = md.cross_entropy_grad %dloss, %logits, %ids ignore_index -100 : tensor<f32>, tensor<8x64x50304xf32>, tensor<8x64xi32>
  // CHECK: md.sum_grad %{{.*}} dims [0, 1] : tensor<768xf32> to tensor<8x64x768xf32>
  %5 = md.sum_grad %s dims [0, 1] : tensor<768xf32> to tensor<8x64x768xf32>
  // CHECK: md.sum_grad %{{.*}} dims [2] keepdim : tensor<8x64x1xf32> to tensor<8x64x768xf32>
  %6 = md.sum_grad %sk dims [2] keepdim : tensor<8x64x1xf32> to tensor<8x64x768xf32>
  // CHECK: md.mean_grad %{{.*}} dims [0, 1] : tensor<768xf32> to tensor<8x64x768xf32>
  %7 = md.mean_grad %s dims [0, 1] : tensor<768xf32> to tensor<8x64x768xf32>
  // CHECK: md.mean_grad %{{.*}} dims [-1] keepdim : tensor<8x64x1xf32> to tensor<8x64x768xf32>
  %8 = md.mean_grad %sk dims [-1] keepdim : tensor<8x64x1xf32> to tensor<8x64x768xf32>
  return
}

// CHECK-LABEL: func.func @rsqrt
// CHECK: md.rsqrt %{{.*}} eps 1.000000e-05 : tensor<8xf32>
// CHECK: md.rsqrt %{{.*}} : tensor<8xbf16>
func.func @rsqrt(%x: tensor<8xf32>, %h: tensor<8xbf16>) -> (tensor<8xf32>, tensor<8xbf16>) {
  %0 = md.rsqrt %x eps 1.0e-5 : tensor<8xf32>
  %1 = md.rsqrt %h : tensor<8xbf16>
  return %0, %1 : tensor<8xf32>, tensor<8xbf16>
}

// CHECK-LABEL: func.func @sqrt
// CHECK: md.sqrt %{{.*}} : tensor<f32>
func.func @sqrt(%x: tensor<f32>) -> tensor<f32> {
  %0 = md.sqrt %x : tensor<f32>
  return %0 : tensor<f32>
}
