// RUN: md-opt %s -split-input-file -verify-diagnostics

md.model @m {
  // expected-error @+1 {{'md.state' op a sharded state has a 1-D type with a dynamic dim (its size is ceil(N / group size)), not 'tensor<36xf32>'}}
  md.state @s : tensor<36xf32> shard(36) group world role master
}

// -----

md.model @m {
  // expected-error @+1 {{'md.state' op a full state has a static type, not 'tensor<?xf32>' (a shard needs 'shard(N) group G')}}
  md.state @s : tensor<?xf32> role master
}

// -----

md.model @m {
  md.state @s : tensor<4xf32> role
// expected-error @+1 {{custom op 'md.state' expected valid keyword}}
}

// -----

md.model @m {
  // expected-error @+1 {{unknown keyword 'weights'}}
  md.state @s : tensor<4xf32> role weights
}

// -----

func.func @f() -> tensor<4xf32> {
  // expected-error @+1 {{'md.state_load' op 'nope' is not an 'md.state' of the model}}
  %0 = md.state_load @nope : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

md.model @m {
  // expected-note @+1 {{state declared here}}
  md.state @s : tensor<4xf32> role master
  md.forward @forward() -> tensor<f32> {
    // expected-error @+1 {{'md.state_load' op type 'tensor<8xf32>' does not match state 's' of type 'tensor<4xf32>'}}
    %0 = md.state_load @s : tensor<8xf32>
    %1 = md.sum %0 dims [0] : tensor<8xf32> to tensor<f32>
    md.return %1 : tensor<f32>
  }
}

// -----

md.model @m {
  // expected-note @+1 {{state declared here}}
  md.state @s : tensor<4xf32> role master
  md.forward @forward(%x: tensor<4xbf16>) -> tensor<f32> {
    // expected-error @+1 {{'md.state_store' op type 'tensor<4xbf16>' does not match state 's' of type 'tensor<4xf32>'}}
    md.state_store %x, @s : tensor<4xbf16>
    %1 = md.sum %x dims [0] : tensor<4xbf16> to tensor<bf16>
    %2 = md.cast %1 : tensor<bf16> to tensor<f32>
    md.return %2 : tensor<f32>
  }
}

// -----

func.func @f() {
  // expected-error @+1 {{'md.batch' op must be in the step region of an 'md.train'}}
  %0 = md.batch : tensor<4xf32>
  return
}

// -----

md.model @m {
  md.forward @forward(%x: tensor<2x8xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<2x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
    // expected-error @+1 {{'md.batch' op results must be typed like the arguments of @forward (1 values)}}
    %x = md.batch : tensor<2x4xf32>
  } hooks {
  }
}

// -----

md.model @m {
  md.state @acc : tensor<36xf32> role grad_acc
  md.forward @forward(%x: tensor<36xf32>) -> tensor<f32> {
    // expected-error @+1 {{'md.grad_accumulate' op must be inside 'md.micro_steps'}}
    md.grad_accumulate %x into @acc : tensor<36xf32>
    %l = md.sum %x dims [0] : tensor<36xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

md.model @m {
  md.state @acc : tensor<36xf32> role master
  md.forward @forward(%x: tensor<36xf32>) -> tensor<f32> {
    // expected-error @+1 {{'md.grad_total' op 'acc' is not a 'grad_acc' state}}
    %t = md.grad_total %x from @acc : tensor<36xf32> -> tensor<36xf32>
    %l = md.sum %t dims [0] : tensor<36xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

md.model @m {
  md.state @acc : tensor<36xf32> role grad_acc
  md.forward @forward(%x: tensor<40xf32>) -> tensor<f32> {
    // expected-error @+1 {{'md.grad_total' op gradient of type 'tensor<40xf32>' does not fit accumulator 'acc' of type 'tensor<36xf32>'}}
    %t = md.grad_total %x from @acc : tensor<40xf32> -> tensor<40xf32>
    %l = md.sum %t dims [0] : tensor<40xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

func.func @f(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  // expected-error @+1 {{'md.grad_total' op result must be the f32 tensor of the gradient's shape}}
  %t = md.grad_total %x from @acc : tensor<4xbf16> -> tensor<4xbf16>
  return %t : tensor<4xbf16>
}

// -----

func.func @f() {
  // expected-error @+1 {{'md.micro_steps' op must be in the step region of an 'md.train'}}
  md.micro_steps {
  }
  return
}

// -----

func.func @f(%x: tensor<4x4xf32>) -> tensor<?xf32> {
  // expected-error @+1 {{'md.shard_slice' op input must be a static 1-D buffer, not 'tensor<4x4xf32>'}}
  %s = md.shard_slice %x group world : tensor<4x4xf32> -> tensor<?xf32>
  return %s : tensor<?xf32>
}

// -----

func.func @f(%x: tensor<16xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'md.shard_slice' op result must be a 1-D shard with a dynamic dim, not 'tensor<4xf32>'}}
  %s = md.shard_slice %x group world : tensor<16xf32> -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<16xf32>) -> tensor<?xbf16> {
  // expected-error @+1 {{'md.shard_slice' op element types differ: 'f32' vs 'bf16'}}
  %s = md.shard_slice %x group world : tensor<16xf32> -> tensor<?xbf16>
  return %s : tensor<?xbf16>
}

// -----

md.model @m {
  // expected-note @+1 {{state declared here}}
  md.state @u1.frozen : tensor<4xf32> role frozen unit 1
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    // expected-error @+1 {{'md.state_store' op stores to 'u1.frozen', a 'frozen' state: frozen parameters are never updated}}
    md.state_store %x, @u1.frozen : tensor<4xf32>
    %1 = md.sum %x dims [0] : tensor<4xf32> to tensor<f32>
    md.return %1 : tensor<f32>
  }
}
