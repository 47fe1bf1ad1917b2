//===- Backend.h - the interface every compute backend implements -*- C++
//-*-===//
//
// The executor runs a plan's kernel instructions through this interface, so
// the CPU backend (runtime/cpu) and the CUDA backend plug in the same way.
// A backend provides memory, two streams with events between them, and one
// entry point per op family of the md dialect. docs/dialect.md is the
// semantic reference for every kernel; docs/runtime-cpu.md says how the CPU
// backend computes them.
//
// Conventions shared by every kernel:
//  - Operands and results are TensorRefs into memory of this backend. The
//    caller allocates results with their final shape and element type; the
//    kernel checks every shape and type against the op's rules and returns
//    InvalidArgument, naming the op and the operand, when they do not hold.
//    Nothing is written when a check fails.
//  - Results may alias an operand exactly (same pointer, same shape) for the
//    elementwise ops (binary, scale, gelu, relu and their gradients, cast
//    between equal sizes, accumulate) and for the optimizer updates (which
//    are meant to run in place). Any other overlap is undefined.
//  - Each argument struct carries the stream it runs on. The CPU backend
//    runs everything synchronously and in order.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_BACKEND_H
#define MD_RUNTIME_CORE_BACKEND_H

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/core/Tensor.h"

namespace md::runtime {

/// Every allocation is aligned to this many bytes (a cache line, and enough
/// for any vector load).
inline constexpr int64_t kAllocAlignment = 64;

/// A block of backend memory, freed when the Buffer goes away.
class Buffer {
public:
  using Release = void (*)(void *);
  Buffer() = default;
  Buffer(void *data, int64_t bytes, Release release)
      : data_(data, release), bytes_(bytes) {}

  void *data() const { return data_.get(); }
  int64_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }

private:
  std::unique_ptr<void, Release> data_{nullptr, nullptr};
  int64_t bytes_ = 0;
};

/// Bump allocation out of one Buffer: the executor places every buffer of a
/// plan at the offset md-plan-memory chose, or asks the arena for the next
/// free aligned block. Nothing is freed individually.
class Arena {
public:
  explicit Arena(Buffer block) : block_(std::move(block)) {}
  /// The next `bytes` bytes, aligned to kAllocAlignment; ResourceExhausted
  /// when the block is full.
  absl::StatusOr<void *> take(int64_t bytes);
  /// The memory at `offset` (a multiple of kAllocAlignment) of size `bytes`.
  absl::StatusOr<void *> at(int64_t offset, int64_t bytes) const;
  int64_t used() const { return used_; }
  int64_t capacity() const { return block_.bytes(); }

private:
  Buffer block_;
  int64_t used_ = 0;
};

/// Streams are numbered; every backend has at least these two.
struct Stream {
  int id = 0;
};
inline constexpr Stream kComputeStream{0};
inline constexpr Stream kCommStream{1};

/// An event created by Backend::createEvent.
struct Event {
  int id = -1;
};

//===----------------------------------------------------------------------===//
// Kernel arguments, one struct per op family.
//===----------------------------------------------------------------------===//

/// md.matmul: out = op_a(a) · op_b(b) + bias.
struct MatmulArgs {
  TensorRef a, b;
  std::optional<TensorRef> bias; // [N]
  TensorRef out;                 // [..., M, N]
  bool transposeA = false, transposeB = false;
  Stream stream = kComputeStream;
};

/// md.matmul_gelu: pre = op_a(a) · op_b(b) + bias, as md.matmul computes
/// it, and out = gelu(pre), as md.gelu computes it.
struct MatmulGeluArgs {
  TensorRef a, b;
  std::optional<TensorRef> bias; // [N]
  TensorRef out, pre;            // [..., M, N] each
  bool transposeA = false, transposeB = false;
  bool approximate = false;
  Stream stream = kComputeStream;
};

/// md.matmul_grad: da, db and (with has_bias) dbias from dy.
struct MatmulGradArgs {
  TensorRef dy, a, b;
  TensorRef da, db;
  std::optional<TensorRef> dbias;
  bool transposeA = false, transposeB = false;
  Stream stream = kComputeStream;
};

enum class BinaryOp { add, sub, mul };

/// md.add / md.sub / md.mul with numpy broadcasting.
struct BinaryArgs {
  BinaryOp op = BinaryOp::add;
  TensorRef lhs, rhs, out;
  Stream stream = kComputeStream;
};

/// md.scale: out = x * factor.
struct ScaleArgs {
  TensorRef x, out;
  double factor = 1.0;
  Stream stream = kComputeStream;
};

/// md.gelu (approximate: the tanh form) and md.relu.
struct GeluArgs {
  TensorRef x, out;
  bool approximate = false;
  Stream stream = kComputeStream;
};
struct GeluGradArgs {
  TensorRef dy, x, dx;
  bool approximate = false;
  Stream stream = kComputeStream;
};
struct ReluArgs {
  TensorRef x, out;
  Stream stream = kComputeStream;
};
struct ReluGradArgs {
  TensorRef dy, x, dx;
  Stream stream = kComputeStream;
};

/// md.layer_norm over the last dim; beta is optional.
struct LayerNormArgs {
  TensorRef x, gamma;
  std::optional<TensorRef> beta;
  TensorRef out;
  double eps = 1e-5;
  Stream stream = kComputeStream;
};
/// md.layer_norm_grad; dbeta is present exactly when has_beta.
struct LayerNormGradArgs {
  TensorRef dy, x, gamma;
  TensorRef dx, dgamma;
  std::optional<TensorRef> dbeta;
  double eps = 1e-5;
  Stream stream = kComputeStream;
};

/// md.rms_norm over the last dim.
struct RmsNormArgs {
  TensorRef x, gamma, out;
  double eps = 1e-6;
  Stream stream = kComputeStream;
};
struct RmsNormGradArgs {
  TensorRef dy, x, gamma;
  TensorRef dx, dgamma;
  double eps = 1e-6;
  Stream stream = kComputeStream;
};

/// md.batch_norm, channels last; mean and invstd are f32 [C] results.
struct BatchNormArgs {
  TensorRef x, gamma, beta;
  TensorRef out, mean, invstd;
  double eps = 1e-5;
  Stream stream = kComputeStream;
};
struct BatchNormGradArgs {
  TensorRef dy, x, gamma, mean, invstd;
  TensorRef dx, dgamma, dbeta;
  Stream stream = kComputeStream;
};

/// md.softmax along `axis` (negative counts from the end).
struct SoftmaxArgs {
  TensorRef x, out;
  int64_t axis = -1;
  Stream stream = kComputeStream;
};
/// md.softmax_grad from the softmax output y.
struct SoftmaxGradArgs {
  TensorRef dy, y, dx;
  int64_t axis = -1;
  Stream stream = kComputeStream;
};

/// md.causal_attention on [B, T, C] with C split into numHeads heads.
struct CausalAttentionArgs {
  TensorRef q, k, v, out;
  int64_t numHeads = 1;
  Stream stream = kComputeStream;
};
struct CausalAttentionGradArgs {
  TensorRef dout, q, k, v;
  TensorRef dq, dk, dv;
  int64_t numHeads = 1;
  Stream stream = kComputeStream;
};

/// md.embedding: out[i..., :] = table[ids[i...], :].
struct EmbeddingArgs {
  TensorRef table, ids, out;
  Stream stream = kComputeStream;
};
/// md.embedding_grad: a scatter-add of dy into out [num_embeddings, D].
struct EmbeddingGradArgs {
  TensorRef dy, ids, out;
  Stream stream = kComputeStream;
};

/// md.cross_entropy: out is the mean loss, a 0-D f32 tensor.
struct CrossEntropyArgs {
  TensorRef logits, targets, out;
  std::optional<int64_t> ignoreIndex;
  Stream stream = kComputeStream;
};
/// md.cross_entropy_grad: dlogits from the 0-D f32 dloss.
struct CrossEntropyGradArgs {
  TensorRef dloss, logits, targets, dlogits;
  std::optional<int64_t> ignoreIndex;
  Stream stream = kComputeStream;
};

/// md.reshape (a row-major copy; nothing to do when out.data == x.data).
struct ReshapeArgs {
  TensorRef x, out;
  Stream stream = kComputeStream;
};
/// md.transpose: out dim i is x dim perm[i].
struct TransposeArgs {
  TensorRef x, out;
  std::vector<int64_t> perm;
  Stream stream = kComputeStream;
};
/// md.arange: out = [start, end) as i32 or i64.
struct ArangeArgs {
  TensorRef out;
  int64_t start = 0, end = 0;
  Stream stream = kComputeStream;
};

enum class ReduceKind { sum, mean };

/// md.sum / md.mean over `dims`.
struct ReduceArgs {
  ReduceKind kind = ReduceKind::sum;
  TensorRef x, out;
  std::vector<int64_t> dims;
  bool keepdim = false;
  Stream stream = kComputeStream;
};
/// md.sum_grad / md.mean_grad: broadcasts dy back to dx's shape.
struct ReduceGradArgs {
  ReduceKind kind = ReduceKind::sum;
  TensorRef dy, dx;
  std::vector<int64_t> dims;
  bool keepdim = false;
  Stream stream = kComputeStream;
};
/// md.sum_to: sums g down to out's (pre-broadcast) shape.
struct SumToArgs {
  TensorRef g, out;
  Stream stream = kComputeStream;
};
/// md.accumulate: out = acc + g in f32, with acc's type.
struct AccumulateArgs {
  TensorRef acc, g, out;
  Stream stream = kComputeStream;
};

/// md.cast between bf16, f16 and f32 (round to nearest even).
struct CastArgs {
  TensorRef x, out;
  Stream stream = kComputeStream;
};
/// md.flatten: the inputs back to back in a zero-padded 1-D out.
struct FlattenArgs {
  std::vector<TensorRef> inputs;
  TensorRef out;
  Stream stream = kComputeStream;
};
/// md.view: elements [offset, offset + numel(out)) of the 1-D source.
struct ViewArgs {
  TensorRef source, out;
  int64_t offset = 0;
  Stream stream = kComputeStream;
};

/// md.adamw_update. newParam/newM/newV may be param/m/v themselves.
struct AdamWArgs {
  TensorRef param, grad, m, v;
  TensorRef newParam, newM, newV;
  float lr = 0.0f;
  int64_t step = 1; // 1-based
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
  /// With parameter groups, the wrap unit the operands belong to: the
  /// executor runs the update once per group's range of elements
  /// (runtime/core/OptimizerGroups.h); a backend never sees it set.
  std::optional<int64_t> unit;
  Stream stream = kComputeStream;
};

/// md.sgd_update. The momentum buffer (and newMomentumBuffer) are present
/// exactly when momentum > 0.
struct SgdArgs {
  TensorRef param, grad;
  std::optional<TensorRef> momentumBuffer;
  TensorRef newParam;
  std::optional<TensorRef> newMomentumBuffer;
  float lr = 0.0f;
  int64_t step = 1; // 1-based
  double momentum = 0.0, dampening = 0.0, weightDecay = 0.0;
  bool nesterov = false;
  std::optional<int64_t> unit; // as AdamWArgs::unit
  Stream stream = kComputeStream;
};

/// md.global_norm: out (0-D f32) is the 2-norm of all inputs together, or
/// its square.
struct GlobalNormArgs {
  std::vector<TensorRef> inputs;
  TensorRef out;
  bool squared = false;
  Stream stream = kComputeStream;
};
/// md.clip: outs[i] = grads[i] * min(1, maxNorm / (norm + 1e-6)).
struct ClipArgs {
  std::vector<TensorRef> grads;
  TensorRef norm; // 0-D f32
  std::vector<TensorRef> outs;
  double maxNorm = 1.0;
  Stream stream = kComputeStream;
};

//===----------------------------------------------------------------------===//
// The interface
//===----------------------------------------------------------------------===//

class Backend {
public:
  virtual ~Backend();

  /// "cpu", "cuda".
  virtual const char *name() const = 0;

  // --- Memory ---------------------------------------------------------------
  /// `bytes` bytes of backend memory aligned to kAllocAlignment, zeroed.
  /// ResourceExhausted when there is not enough.
  virtual absl::StatusOr<Buffer> allocate(int64_t bytes) = 0;
  /// Copies between any two pointers this backend can address (host memory
  /// included), in stream order.
  virtual absl::Status copy(void *dst, const void *src, int64_t bytes,
                            Stream stream) = 0;
  virtual absl::Status zero(void *dst, int64_t bytes, Stream stream) = 0;

  // --- Streams and events ---------------------------------------------------
  /// Streams 0..numStreams()-1 exist from the start (kComputeStream,
  /// kCommStream, ...).
  virtual int numStreams() const = 0;
  /// Whether the streams run concurrently (a GPU), so that only the plan's
  /// events order them; the executor then refuses a plan whose events leave
  /// a cross-stream conflict unordered (StreamOrder.h). False: everything
  /// runs in program order (the CPU backend).
  virtual bool concurrentStreams() const { return false; }
  virtual absl::StatusOr<Event> createEvent() = 0;
  /// Marks the point in `stream` that a later waitEvent waits for.
  virtual absl::Status recordEvent(Stream stream, Event event) = 0;
  /// Work queued on `stream` after this starts once the last recordEvent of
  /// `event` has completed; the host does not block.
  virtual absl::Status waitEvent(Stream stream, Event event) = 0;
  /// Blocks the host until everything queued on `stream` has run.
  virtual absl::Status synchronize(Stream stream) = 0;

  // --- Kernels (docs/dialect.md) --------------------------------------------
  // One pure virtual per row of BackendOps.def:
  //   virtual absl::Status matmul(const MatmulArgs &args) = 0; ...
#define MD_BACKEND_OP(entry, Args)                                             \
  virtual absl::Status entry(const Args &args) = 0;
#include "runtime/core/BackendOps.def"

protected:
  /// md.matmul_gelu unfused: matmul into `pre`, then gelu of `pre` into
  /// `out`, with this backend's two kernels (so their bits), for a
  /// matmulGelu without a fused kernel for the case at hand.
  absl::Status matmulThenGelu(const MatmulGeluArgs &args);
};

} // namespace md::runtime

/// Declares, inside a backend class, the overrides of Backend's copies,
/// events and synchronization, which every backend implements with these
/// signatures: one list, so a change to the interface is made once.
#define MD_BACKEND_STREAM_OVERRIDES                                            \
  absl::Status copy(void *dst, const void *src, int64_t bytes,                 \
                    ::md::runtime::Stream stream) override;                    \
  absl::Status zero(void *dst, int64_t bytes, ::md::runtime::Stream stream)    \
      override;                                                                \
  absl::StatusOr<::md::runtime::Event> createEvent() override;                 \
  absl::Status recordEvent(::md::runtime::Stream stream,                       \
                           ::md::runtime::Event event) override;               \
  absl::Status waitEvent(::md::runtime::Stream stream,                         \
                         ::md::runtime::Event event) override;                 \
  absl::Status synchronize(::md::runtime::Stream stream) override;

#endif // MD_RUNTIME_CORE_BACKEND_H
