// RUN: md-opt %s -split-input-file -verify-diagnostics

func.func @lr_outside_train(%s: i64) {
  // expected-error @+1 {{'md.lr' op must be inside an 'md.train', whose schedule it reads}}
  %lr = md.lr %s : f32
  return
}

// -----

func.func @loss_outside_train() {
  // expected-error @+1 {{'md.loss' op must be inside an 'md.train': there is no loss outside training}}
  %l = md.loss : tensor<f32>
  return
}

// -----

func.func @if_results_without_else(%c: i1, %x: tensor<f32>) {
  // expected-error @+1 {{'md.if' op with results needs an else region}}
  %r = md.if %c -> (tensor<f32>) {
    md.yield %x : tensor<f32>
  }
  return
}

// -----

func.func @if_yield_count(%c: i1, %x: tensor<f32>) {
  // expected-error @+1 {{'md.if' op the then region yields 2 values, the op has 1 results}}
  %r = md.if %c -> (tensor<f32>) {
    md.yield %x, %x : tensor<f32>, tensor<f32>
  } else {
    md.yield %x : tensor<f32>
  }
  return
}

// -----

func.func @if_yield_type(%c: i1, %x: tensor<f32>, %y: tensor<2xf32>) {
  // expected-error @+1 {{'md.if' op the else region yields 'tensor<2xf32>' for result #0 of type 'tensor<f32>'}}
  %r = md.if %c -> (tensor<f32>) {
    md.yield %x : tensor<f32>
  } else {
    md.yield %y : tensor<2xf32>
  }
  return
}

// -----

func.func @if_condition_not_i1(%c: i64) {
  // expected-error @+1 {{'md.if' op operand #0 must be 1-bit signless integer, but got 'i64'}}
  "md.if"(%c) ({
    md.yield
  }, {
  }) : (i64) -> ()
  return
}

// -----

func.func @every_time_period_outside_train() {
  // expected-error @+1 {{'md.every' op with a time period must be inside an 'md.train' hook}}
  md.every 5 minutes {
    md.print "x"
  }
  return
}

// -----

func.func @every_zero_period() {
  // expected-error @+1 {{'md.every' op attribute 'period' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  md.every 0 steps {
    md.print "x"
  }
  return
}

// -----

func.func @every_unknown_unit() {
  // expected-error @+1 {{unknown keyword 'hours'; expected one of: steps, seconds, minutes}}
  md.every 2 hours {
    md.print "x"
  }
  return
}

// -----

func.func @every_rank0_only_with_save() {
  // expected-error @+2 {{'md.every' op is rank0_only but communicates: the other ranks would never join its collective (a deadlock); drop rank0_only, md already writes on rank 0 only where that is safe}}
  // expected-note @+1 {{fix: every rank must run 'md.save'}}
  md.every 100 steps rank0_only {
    // expected-note @+1 {{'md.save' communicates here}}
    md.save full "ckpt"
  }
  return
}

// -----

func.func @every_yields_values(%x: tensor<f32>) {
  // expected-error @+1 {{'md.every' op the body region yields 1 values, the op has 0 results}}
  "md.every"() <{period = 1 : i64, unit = #md.period_unit<steps>}> ({
    md.yield %x : tensor<f32>
  }) : () -> ()
  return
}

// -----

func.func @for_induction_variable_not_i64(%lb: i64, %ub: i64) {
  // expected-error @+1 {{'md.for' op body must have one i64 induction variable}}
  "md.for"(%lb, %ub) ({
  ^bb0(%i: i32):
    md.yield
  }) : (i64, i64) -> ()
  return
}

// -----

func.func @save_rank0_only() {
  // expected-error @+2 {{'md.save' op is rank0_only but communicates: the other ranks would never join its collective (a deadlock); drop rank0_only, md already writes on rank 0 only where that is safe}}
  // expected-note @+1 {{fix: every rank must run 'md.save' (a full checkpoint gathers the parameters to rank 0, which alone writes the file; a sharded one barriers before the rename)}}
  md.save full "ckpt" rank0_only
  return
}

// -----

func.func @save_empty_path() {
  // expected-error @+1 {{'md.save' op checkpoint path is empty}}
  md.save sharded ""
  return
}

// -----

func.func @save_keep_zero() {
  // expected-error @+1 {{'md.save' op attribute 'keep' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  md.save sharded "ckpt" keep 0
  return
}

// -----

func.func @exit_failure_without_reason() {
  // expected-error @+1 {{'md.exit' op a failure needs a reason}}
  md.exit failure
  return
}

// -----

func.func @exit_failure_empty_reason() {
  // expected-error @+1 {{'md.exit' op a failure needs a reason}}
  md.exit "" failure
  return
}

// -----

func.func @save_unknown_format() {
  // expected-error @+1 {{unknown keyword 'partial'; expected one of: full, sharded}}
  md.save partial
  return
}

// -----

md.model @evaluate_rank0_only {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @f() {
    // expected-error @+2 {{'md.evaluate' op is rank0_only but communicates}}
    // expected-note @+1 {{fix: run 'md.evaluate' on every rank (its all-reduced loss is the same everywhere) and log the result with rank0_only}}
    %v = md.evaluate @forward(#md.data<synthetic, "">) rank0_only : tensor<f32>
    md.return
  }
}

// -----

func.func @yield_outside_region_op() {
  // expected-error @+1 {{'md.yield' op expects parent op to be one of 'md.if, md.every, md.for, md.micro_steps'}}
  md.yield
}

// -----

func.func @evaluate_result_not_scalar() {
  // expected-error @+1 {{'md.evaluate' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<2xf32>'}}
  %v = md.evaluate @forward(#md.data<synthetic, "">) : tensor<2xf32>
  return
}

// -----

func.func @rank_not_i64() {
  // expected-error @+1 {{'md.rank' op result #0 must be 64-bit signless integer, but got 'i32'}}
  %r = md.rank : i32
  return
}

// -----

func.func @local_rank_not_i64() {
  // expected-error @+1 {{'md.local_rank' op result #0 must be 64-bit signless integer, but got 'i16'}}
  %r = md.local_rank : i16
  return
}

// -----

func.func @world_size_not_i64() {
  // expected-error @+1 {{'md.world_size' op result #0 must be 64-bit signless integer, but got 'i32'}}
  %w = md.world_size : i32
  return
}

// -----

func.func @step_not_i64() {
  // expected-error @+1 {{'md.step' op result #0 must be 64-bit signless integer, but got 'i8'}}
  %s = md.step : i8
  return
}

// -----

func.func @epoch_not_i64() {
  // expected-error @+1 {{'md.epoch' op result #0 must be 64-bit signless integer, but got 'i1'}}
  %e = md.epoch : i1
  return
}

// -----

func.func @wall_time_not_f64() {
  // expected-error @+1 {{'md.wall_time' op result #0 must be 64-bit float, but got 'f32'}}
  %t = md.wall_time : f32
  return
}

// -----

func.func @file_exists_not_i1() {
  // expected-error @+1 {{'md.file_exists' op result #0 must be 1-bit signless integer, but got 'i64'}}
  %e = md.file_exists "STOP" : i64
  return
}

// -----

func.func @exit_reason_not_a_string() {
  // expected-error @+1 {{invalid properties {reason = 3 : i64} for op md.exit: Invalid attribute `reason` in property conversion: 3 : i64}}
  "md.exit"() <{reason = 3 : i64}> : () -> ()
  return
}

// -----

func.func @log_tag_not_a_string() {
  // expected-error @+1 {{invalid properties {tag = 1 : i64} for op md.log: Invalid attribute `tag` in property conversion: 1 : i64}}
  "md.log"() <{tag = 1 : i64}> : () -> ()
  return
}

// -----

func.func @print_without_message() {
  // expected-error @+1 {{'md.print' op requires attribute 'message'}}
  "md.print"() : () -> ()
  return
}
