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
// Kernel arguments
//===----------------------------------------------------------------------===//

/// The function of md.elementwise and md.elementwise_grad (the plan's
/// fb::ElementwiseFn: the same values, runtime/exec/KernelDispatch.cpp
/// checks).
enum class ElementwiseFn : uint8_t {
  exp, log, sin, cos, tanh, sigmoid, abs, neg, sqrt, rsqrt
};
/// "exp", ... for messages.
const char *ElementwiseFnName(ElementwiseFn fn);

// One struct per MD_KERNEL row of runtime/core/Opcodes.def, named by its
// Args column: a member per operand and attribute slot, named by the item's
// `field` (a tensor is a TensorRef, an optional one a std::optional, a list
// a std::vector; a bool slot a bool, another int slot an int64_t, a float
// slot a double; the host scalars lr and step a float and an int64_t), then
// the stream. Every member starts zero, false or empty: a caller sets each
// one the kernel reads. The rows' comments say what each kernel computes;
// md.<name> in docs/dialect.md says it in full.
//
//   struct MatmulArgs {
//     TensorRef a, b; std::optional<TensorRef> bias; TensorRef out;
//     bool transposeA, transposeB; Stream stream = kComputeStream;
//   };
#define MD_EXPAND(...) __VA_ARGS__
#define MD_INT_Bool bool
#define MD_INT_Any int64_t
#define MD_INT_Positive int64_t
#define MD_INT_NonNegative int64_t
#define MD_INT_ElementwiseFn ElementwiseFn
#define MD_T(field) TensorRef field;
#define MD_T_OPT(field) std::optional<TensorRef> field;
#define MD_T_LIST(field, min) std::vector<TensorRef> field;
#define MD_HOST_F(field) float field = 0.0f;
#define MD_HOST_I(field) int64_t field = 0;
#define MD_I(field, name, Kind) MD_INT_##Kind field{};
#define MD_I_NOARG(field, name, Kind)
#define MD_I_OPT(field, name, Kind) std::optional<int64_t> field;
#define MD_I_LIST(field, name, Kind, min) std::vector<int64_t> field;
#define MD_F(field, name, Kind) double field = 0.0;
#define MD_F_LIST(field, name, min) std::vector<double> field;
#define MD_KERNEL(Name, Value, Str, Flags, Since, Rule, Entry, Args, Ins,      \
                  Outs, Ints, Floats)                                          \
  struct Args {                                                                \
    MD_EXPAND Ins MD_EXPAND Outs MD_EXPAND Ints MD_EXPAND Floats               \
    Stream stream = kComputeStream;                                            \
  };
#define MD_KERNEL_SHARED(...)
#include "runtime/core/Opcodes.def"
#undef MD_EXPAND
#undef MD_INT_Bool
#undef MD_INT_Any
#undef MD_INT_Positive
#undef MD_INT_NonNegative
#undef MD_INT_ElementwiseFn

// The structs of the entries that several rows share (MD_KERNEL_SHARED),
// and of view, which no opcode calls (a plan's view aliases its source) but
// hand-built callers do.

enum class BinaryOp { add, sub, mul, div, maximum, minimum };

/// md.add / md.sub / md.mul with numpy broadcasting.
struct BinaryArgs {
  BinaryOp op = BinaryOp::add;
  TensorRef lhs, rhs, out;
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
/// md.view: elements [offset, offset + numel(out)) of the 1-D source.
struct ViewArgs {
  TensorRef source, out;
  int64_t offset = 0;
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
  // One pure virtual per entry of BackendOps.def (the MD_KERNEL rows of
  // Opcodes.def and the shared entries above):
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
