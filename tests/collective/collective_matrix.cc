// The collective matrix: each case fills its inputs from value_at(), runs one
// operation and compares every element with the expected value (exact for
// integers, within rounding for floats).
#include "tests/collective/collective_matrix.h"

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "tests/collective/collective_check.h"

namespace cohort::collective::testing {

namespace {

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16,
                         DType::kI32, DType::kI64,  DType::kU8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

// A buffer in the communicator's memory with a host mirror.
struct Buffer {
  Memory* memory;
  DType dtype;
  size_t count;
  std::vector<unsigned char> host;
  void* device;
  Buffer(Memory* m, DType t, size_t n) : memory(m), dtype(t), count(n), host(make_buffer(t, n)) {
    device = memory->alloc(n * dtype_size(t));
  }
  ~Buffer() { memory->release(device); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void push() { memory->upload(device, host.data(), count * dtype_size(dtype)); }
  void pull() { memory->download(host.data(), device, count * dtype_size(dtype)); }
  double at(size_t i) const { return load_value(dtype, host.data(), i); }
  void* ptr(size_t element = 0) { return static_cast<char*>(device) + element * dtype_size(dtype); }
};

class Matrix {
 public:
  Matrix(Communicator& comm, Memory* memory) : comm_(comm), memory_(memory) {}

  int failures() const { return failures_; }

  void all_reduce(DType t, size_t n, ReduceOp op, bool in_place) {
    Buffer in(memory_, t, n), out(memory_, t, n);
    fill(t, in.host.data(), comm_.rank(), n);
    in.push();
    AllReduceOptions o;
    o.op = op;
    Buffer& result = in_place ? in : out;
    std::string name =
        std::string("all_reduce ") + reduce_op_name(op) + (in_place ? " in-place" : "");
    if (!run(name, t, n, comm_.all_reduce(in.ptr(), result.ptr(), n, t, o))) return;
    result.pull();
    check(
        name, t, n, [&](size_t i) { return expected_reduce(t, op, comm_.size(), i); }, result);
  }

  void reduce_scatter(DType t, size_t n, ReduceOp op, bool in_place) {
    int size = comm_.size();
    Buffer in(memory_, t, n * size), out(memory_, t, n);
    fill(t, in.host.data(), comm_.rank(), n * size);
    in.push();
    ReduceScatterOptions o;
    o.op = op;
    void* recv = in_place ? in.ptr(n * comm_.rank()) : out.ptr();
    std::string name =
        std::string("reduce_scatter ") + reduce_op_name(op) + (in_place ? " in-place" : "");
    if (!run(name, t, n, comm_.reduce_scatter(in.ptr(), recv, n, t, o))) return;
    size_t base = n * comm_.rank();
    if (in_place) {
      in.pull();
      std::memmove(out.host.data(), in.host.data() + base * dtype_size(t), n * dtype_size(t));
    } else {
      out.pull();
    }
    check(
        name, t, n, [&](size_t i) { return expected_reduce(t, op, size, base + i); }, out);
  }

  void all_gather(DType t, size_t n, bool in_place) {
    int size = comm_.size();
    Buffer in(memory_, t, n), out(memory_, t, n * size);
    fill(t, in.host.data(), comm_.rank(), n);
    in.push();
    void* send = in.ptr();
    if (in_place) {
      fill(t, out.host.data() + n * comm_.rank() * dtype_size(t), comm_.rank(), n);
      out.push();
      send = out.ptr(n * comm_.rank());
    }
    std::string name = in_place ? "all_gather in-place" : "all_gather";
    if (!run(name, t, n, comm_.all_gather(send, out.ptr(), n, t))) return;
    out.pull();
    check(
        name, t, n * size,
        [&](size_t i) {
          return Expected{value_at(t, static_cast<int>(i / n), i % n), 0};
        },
        out);
  }

  void all_gather_v(DType t, size_t n) {
    int size = comm_.size();
    std::vector<size_t> counts(size), offsets(size);
    size_t total = 0;
    for (int r = 0; r < size; ++r) {
      // Uneven, some equal, and the last rank (of several) contributes nothing.
      bool empty = n == 0 || (size > 1 && r == size - 1);
      counts[r] = empty ? 0 : n + static_cast<size_t>(r) % 3;
      offsets[r] = total;
      total += counts[r];
    }
    Buffer in(memory_, t, counts[comm_.rank()]), out(memory_, t, total);
    fill(t, in.host.data(), comm_.rank(), counts[comm_.rank()]);
    in.push();
    if (!run("all_gather_v", t, n, comm_.all_gather_v(in.ptr(), out.ptr(), counts, t))) return;
    out.pull();
    check(
        "all_gather_v", t, total,
        [&](size_t i) {
          int r = 0;
          while (r + 1 < size && offsets[r + 1] <= i) ++r;
          return Expected{value_at(t, r, i - offsets[r]), 0};
        },
        out);
  }

  // Rank r sends block_count(r, p) elements to each rank p: uneven, with an
  // empty block from each rank to the next (and every block empty at n 0).
  // Each block holds the sender's values at its offset in the send buffer.
  void all_to_all_v(DType t, size_t n) {
    const int size = comm_.size(), me = comm_.rank();
    auto block_count = [&](int from, int to) -> size_t {
      if (n == 0 || (size > 1 && to == (from + 1) % size)) return 0;
      return n + static_cast<size_t>(from + 2 * to) % 3;
    };
    auto send_offset = [&](int from, int to) {
      size_t offset = 0;
      for (int q = 0; q < to; ++q) offset += block_count(from, q);
      return offset;
    };
    std::vector<size_t> send_counts(size), recv_counts(size), recv_offsets(size);
    size_t send_total = 0, recv_total = 0;
    for (int p = 0; p < size; ++p) {
      send_counts[p] = block_count(me, p), send_total += send_counts[p];
      recv_offsets[p] = recv_total;
      recv_counts[p] = block_count(p, me), recv_total += recv_counts[p];
    }
    Buffer in(memory_, t, send_total), out(memory_, t, recv_total);
    fill(t, in.host.data(), me, send_total);
    in.push();
    if (!run("all_to_all_v", t, n, comm_.all_to_all_v(in.ptr(), send_counts, out.ptr(), recv_counts, t))) return;
    out.pull();
    check(
        "all_to_all_v", t, recv_total,
        [&](size_t i) {
          int p = 0;
          while (p + 1 < size && recv_offsets[p + 1] <= i) ++p;
          return Expected{value_at(t, p, send_offset(p, me) + i - recv_offsets[p]), 0};
        },
        out);
  }

  // Counts that do not fit the group and overlapping buffers are argument
  // errors, and the communicator stays usable.
  void all_to_all_v_argument_errors() {
    const size_t size = static_cast<size_t>(comm_.size());
    Buffer buf(memory_, DType::kI32, 4 * size);
    std::vector<size_t> ones(size, 1), short_list(size + 1, 1);
    Status wrong = comm_.all_to_all_v(buf.ptr(), short_list, buf.ptr(2 * size), ones, DType::kI32);
    Status overlap = comm_.all_to_all_v(buf.ptr(), ones, buf.ptr(size - 1), ones, DType::kI32);
    if (wrong.code() != StatusCode::kInvalidArgument) fail("all_to_all_v with a wrong count list: " + wrong.to_string());
    if (overlap.code() != StatusCode::kInvalidArgument) fail("all_to_all_v in place: " + overlap.to_string());
  }

  void broadcast(DType t, size_t n) {
    int root = comm_.size() - 1;
    Buffer buf(memory_, t, n);
    fill(t, buf.host.data(), comm_.rank() == root ? root : root + 1, n);
    buf.push();
    BroadcastOptions o;
    o.root = root;
    if (!run("broadcast", t, n, comm_.broadcast(buf.ptr(), n, t, o))) return;
    buf.pull();
    check(
        "broadcast", t, n,
        [&](size_t i) {
          return Expected{value_at(t, root, i), 0};
        },
        buf);
  }

  // Each rank sends to the next and receives from the previous, through
  // send_recv and through separately posted send and recv.
  void ring(size_t n, bool paired) {
    int size = comm_.size(), me = comm_.rank();
    int next = (me + 1) % size, prev = (me + size - 1) % size;
    DType t = DType::kI32;
    Buffer out(memory_, t, n), in(memory_, t, n);
    fill(t, out.host.data(), me, n);
    out.push();
    SendRecvOptions o;
    o.tag = 7;
    Status s;
    if (paired) {
      s = comm_.send_recv_async(out.ptr(), n, next, in.ptr(), n, prev, t, o)->wait();
    } else {
      auto r = comm_.recv_async(in.ptr(), n, t, prev, o);
      auto w = comm_.send_async(out.ptr(), n, t, next, o);
      Status sr = r->wait(), sw = w->wait();
      s = sr.is_ok() ? sw : sr;
    }
    std::string name = paired ? "ring send_recv" : "ring send+recv";
    if (!run(name, t, n, s)) return;
    in.pull();
    check(
        name, t, n,
        [&](size_t i) {
          return Expected{value_at(t, prev, i), 0};
        },
        in);
  }

  // Several operations in flight at once, then waited in order; the last
  // issued with `overlap` and ordered through wait_on_stream (the default
  // stream, which the download follows) instead of a host wait.
  void async_batch(size_t n) {
    DType t = DType::kF32;
    Buffer a(memory_, t, n), b(memory_, t, n), c(memory_, t, n), d(memory_, t, n);
    for (Buffer* x : {&a, &b, &c, &d}) {
      fill(t, x->host.data(), comm_.rank(), n);
      x->push();
    }
    AllReduceOptions sum, mx;
    mx.op = ReduceOp::kMax;
    auto wa = comm_.all_reduce_async(a.ptr(), a.ptr(), n, t, sum);
    auto wb = comm_.all_reduce_async(b.ptr(), b.ptr(), n, t, mx);
    auto wc = comm_.all_reduce_async(c.ptr(), c.ptr(), n, t, sum);
    AllReduceOptions overlapped;
    overlapped.overlap = true;
    auto wd = comm_.all_reduce_async(d.ptr(), d.ptr(), n, t, overlapped);
    Status s = wa->wait();
    if (s.is_ok()) s = wb->wait();
    if (s.is_ok()) s = wc->wait();
    if (s.is_ok()) s = wd->wait_on_stream(nullptr);
    if (!run("async batch", t, n, s)) return;
    for (auto* x : {&a, &b, &c, &d}) x->pull();
    check(
        "async batch a", t, n,
        [&](size_t i) { return expected_reduce(t, ReduceOp::kSum, comm_.size(), i); }, a);
    check(
        "async batch b", t, n,
        [&](size_t i) { return expected_reduce(t, ReduceOp::kMax, comm_.size(), i); }, b);
    check(
        "async batch c", t, n,
        [&](size_t i) { return expected_reduce(t, ReduceOp::kSum, comm_.size(), i); }, c);
    check(
        "async batch d (overlap)", t, n,
        [&](size_t i) { return expected_reduce(t, ReduceOp::kSum, comm_.size(), i); }, d);
    if (s = wd->wait(); !s.is_ok()) fail("async batch d: wait after wait_on_stream: " + s.to_string());
  }

  void barrier() { run("barrier", DType::kU8, 0, comm_.barrier()); }

  void fail(const std::string& what) {
    std::printf("FAIL rank %d of %d on '%s': %s\n", comm_.rank(), comm_.size(),
                comm_.name().c_str(), what.c_str());
    std::fflush(stdout);
    ++failures_;
  }

 private:
  bool run(const std::string& name, DType t, size_t n, const Status& s) {
    if (s.is_ok()) return true;
    fail(name + " " + dtype_name(t) + " x" + std::to_string(n) + ": " + s.to_string());
    return false;
  }

  void check(const std::string& name, DType t, size_t n,
             const std::function<Expected(size_t)>& expected, const Buffer& got) {
    for (size_t i = 0; i < n; ++i) {
      Expected e = expected(i);
      double g = got.at(i);
      if (!close_enough(g, e)) {
        char msg[256];
        std::snprintf(msg, sizeof(msg),
                      "%s %s x%zu: element %zu is %.9g, expected %.9g (tolerance %.3g)",
                      name.c_str(), dtype_name(t), n, i, g, e.value, e.tolerance);
        fail(msg);
        return;
      }
    }
  }

  Communicator& comm_;
  Memory* memory_;
  int failures_ = 0;
};

void run_on(Communicator& comm, Memory* memory, size_t big, bool unpaired_p2p, int* failures) {
  Matrix m(comm, memory);
  for (DType t : kDtypes) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}}) {
      for (ReduceOp op : kOps) {
        m.all_reduce(t, n, op, false);
        m.reduce_scatter(t, n, op, false);
      }
      m.all_reduce(t, n, ReduceOp::kSum, true);
      m.reduce_scatter(t, n, ReduceOp::kSum, true);
      m.all_gather(t, n, false);
      m.all_gather(t, n, true);
      m.all_gather_v(t, n);
      m.all_to_all_v(t, n);
      m.broadcast(t, n);
    }
  }
  m.all_to_all_v_argument_errors();
  if (big > 0) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kI32}) {
      m.all_reduce(t, big, ReduceOp::kSum, false);
      m.reduce_scatter(t, big / comm.size(), ReduceOp::kSum, false);
      m.all_gather(t, big / comm.size(), false);
      m.all_to_all_v(t, big / comm.size());
    }
  }
  m.barrier();
  m.async_batch(1000);
  // A ring of one sends to itself.
  for (size_t n : {size_t{1}, size_t{7}, size_t{4096}}) {
    m.ring(n, true);
    if (unpaired_p2p) m.ring(n, false);
  }
  *failures += m.failures();
}

}  // namespace

int run_matrix(Communicator& comm, size_t big, Memory* memory, bool unpaired_p2p) {
  HostMemory host;
  if (memory == nullptr) memory = &host;
  int failures = 0;
  run_on(comm, memory, big, unpaired_p2p, &failures);
  if (comm.size() < 2) return failures;

  // Sub-communicators: evens and odds (the two data-parallel groups of a
  // 2-wide tensor-parallel mesh), then the world reversed.
  std::vector<int> group;
  for (int r = comm.rank() % 2; r < comm.size(); r += 2) group.push_back(r);
  auto half = comm.split(group, {});
  if (!half.is_ok()) {
    Matrix(comm, memory).fail("split " + half.status().to_string());
    return failures + 1;
  }
  run_on(**half, memory, 0, unpaired_p2p, &failures);
  std::vector<int> reversed;
  for (int r = comm.size() - 1; r >= 0; --r) reversed.push_back(r);
  SplitOptions named;
  named.name = "reversed";
  auto rev = comm.split(reversed, named);
  if (!rev.is_ok() || (*rev)->rank() != comm.size() - 1 - comm.rank()) {
    Matrix(comm, memory).fail("reversed split: wrong rank or " + rev.status().to_string());
    return failures + 1;
  }
  // The reversed group gathers in its own order: element r came from the
  // world rank size-1-r.
  Matrix m(**rev, memory);
  int32_t mine = comm.rank();
  std::vector<int32_t> all(comm.size(), -1);
  Buffer send(memory, DType::kI32, 1), recv(memory, DType::kI32, comm.size());
  std::memcpy(send.host.data(), &mine, 4);
  send.push();
  if (!(*rev)->all_gather(send.ptr(), recv.ptr(), 1, DType::kI32).is_ok()) {
    m.fail("all_gather on the reversed group failed");
    return failures + 1;
  }
  recv.pull();
  std::memcpy(all.data(), recv.host.data(), 4 * all.size());
  for (int r = 0; r < comm.size(); ++r) {
    if (all[r] != comm.size() - 1 - r) {
      m.fail("reversed group gathered rank " + std::to_string(all[r]) + " at " + std::to_string(r));
      return failures + 1;
    }
  }
  return failures;
}

}  // namespace cohort::collective::testing
