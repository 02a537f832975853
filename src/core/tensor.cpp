#include "core/tensor.h"

#include <cstring>
#include <stdexcept>

#include "core/numeric.h"

namespace xdna {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

static void check_shape(const Shape& shape, DType dtype) {
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(shape));
  if (!shape.empty()) dtype_bytes(dtype, shape.back());  // throws if rows are not whole blocks
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  check_shape(shape, dtype);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.buffer_ = std::make_shared<HeapBuffer>(dtype_bytes(dtype, shape_numel(shape)));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw(), 0, t.buffer_->size());
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  if (shape_numel(shape) != static_cast<int64_t>(values.size()))
    throw std::invalid_argument("from_vector: " + std::to_string(values.size()) +
                                " values do not fill shape " + shape_str(shape));
  Tensor t = empty(shape, DType::F32);
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::view(std::shared_ptr<Buffer> buffer, size_t byte_offset, const Shape& shape,
                    DType dtype) {
  check_shape(shape, dtype);
  const int64_t bytes = dtype_bytes(dtype, shape_numel(shape));
  if (!buffer || byte_offset > buffer->size() ||
      static_cast<uint64_t>(bytes) > buffer->size() - byte_offset)
    throw std::out_of_range("tensor view of " + std::to_string(bytes) + " bytes at offset " +
                            std::to_string(byte_offset) + " exceeds its buffer");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.buffer_ = std::move(buffer);
  t.offset_ = byte_offset;
  return t;
}

int64_t Tensor::dim(int64_t i) const {
  const int64_t n = ndim();
  if (i < 0) i += n;
  if (i < 0 || i >= n)
    throw std::out_of_range("dimension " + std::to_string(i) + " of a " + std::to_string(n) +
                            "-d tensor");
  return shape_[i];
}

int64_t Tensor::nbytes() const { return dtype_bytes(dtype_, numel()); }

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::reshape(const Shape& shape) const {
  if (!is_contiguous()) throw std::invalid_argument("reshape of a non-contiguous tensor");
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("reshape: more than one -1");
      infer = static_cast<int64_t>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) s[infer] = known ? numel() / known : 0;
  if (shape_numel(s) != numel())
    throw std::invalid_argument("reshape " + shape_str(shape_) + " to " + shape_str(shape));
  if (!s.empty()) dtype_bytes(dtype_, s.back());
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  if (d < 0) d += ndim();
  if (d < 0 || d >= ndim()) throw std::out_of_range("slice: bad dimension");
  if (start < 0 || end < start || end > shape_[d])
    throw std::out_of_range("slice [" + std::to_string(start) + ", " + std::to_string(end) +
                            ") of dimension " + std::to_string(d) + " with size " +
                            std::to_string(shape_[d]));
  const auto& tr = traits(dtype_);
  Tensor t = *this;
  if (tr.block_elems == 1) {
    t.offset_ += static_cast<size_t>(start * strides_[d] * tr.block_bytes);
  } else {
    // Block dtypes: the last dimension may be sliced on block boundaries; outer ones freely.
    if (d == ndim() - 1) {
      if (start % tr.block_elems || end % tr.block_elems)
        throw std::invalid_argument("slice of a " + std::string(tr.name) +
                                    " row must start and end on a block boundary");
      t.offset_ += static_cast<size_t>(start / tr.block_elems * tr.block_bytes);
    } else {
      t.offset_ += static_cast<size_t>(dtype_bytes(dtype_, start * strides_[d]));
    }
  }
  t.shape_[d] = end - start;
  if (scales_) {
    // Scales are shaped like the tensor with the last dimension counted in groups.
    if (d == ndim() - 1) {
      if (start % group_ || end % group_)
        throw std::invalid_argument("slice of a quantized row must start and end on a group boundary");
      t.scales_ = std::make_shared<Tensor>(scales_->slice(d, start / group_, end / group_));
    } else {
      t.scales_ = std::make_shared<Tensor>(scales_->slice(d, start, end));
    }
  }
  return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (traits(dtype_).block_elems != 1 || dtype_ == DType::I8)
    throw std::invalid_argument("transpose of a quantized tensor");
  if (d0 < 0) d0 += ndim();
  if (d1 < 0) d1 += ndim();
  if (d0 < 0 || d1 < 0 || d0 >= ndim() || d1 >= ndim())
    throw std::out_of_range("transpose: bad dimension");
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

// Calls fn(element_offset_of_row_start, row_index) for every innermost row of the tensor.
template <typename Fn>
static void for_each_row(const Shape& shape, const Shape& strides, Fn fn) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (nd == 0) {
    fn(int64_t{0}, int64_t{0});
    return;
  }
  const int64_t rows = shape_numel(shape) / std::max<int64_t>(shape.back(), 1);
  if (shape_numel(shape) == 0) return;
  std::vector<int64_t> idx(nd, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    for (int64_t i = 0; i < nd - 1; ++i) off += idx[i] * strides[i];
    fn(off, r);
    for (int64_t i = nd - 2; i >= 0; --i) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape_, dtype_);
  const auto& tr = traits(dtype_);
  const int64_t cols = shape_.empty() ? 1 : shape_.back();
  const int64_t inner = shape_.empty() ? 1 : strides_.back();
  std::byte* dst = out.raw();
  const std::byte* src = raw();
  const int64_t row_bytes = dtype_bytes(dtype_, cols);
  for_each_row(shape_, strides_, [&](int64_t off, int64_t r) {
    std::byte* d = dst + r * row_bytes;
    if (tr.block_elems != 1 || inner == 1) {
      const int64_t boff = tr.block_elems == 1 ? off * tr.block_bytes : dtype_bytes(dtype_, off);
      std::memcpy(d, src + boff, row_bytes);
    } else {
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(d + c * tr.block_bytes, src + (off + c * inner) * tr.block_bytes,
                    tr.block_bytes);
    }
  });
  if (scales_) out.set_scales(*scales_, group_);
  return out;
}

Tensor Tensor::clone() const {
  Tensor src = contiguous();
  if (src.buffer_ == buffer_) {
    Tensor out = empty(shape_, dtype_);
    std::memcpy(out.raw(), raw(), nbytes());
    if (scales_) out.set_scales(scales_->clone(), group_);
    return out;
  }
  return src;
}

std::vector<float> Tensor::to_vector() const {
  Tensor c = contiguous();
  std::vector<float> out(numel());
  if (out.empty()) return out;
  const int64_t cols = shape_.empty() ? 1 : shape_.back();
  const int64_t rows = numel() / cols;
  const int64_t row_bytes = dtype_bytes(dtype_, cols);
  const int64_t groups_per_row = (scales_ && group_ > 0) ? cols / group_ : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* sc = c.scales_ ? c.scales_->data<float>() + r * groups_per_row : nullptr;
    dequantize_row(dtype_, c.raw() + r * row_bytes, out.data() + r * cols, cols, sc, group_);
  }
  return out;
}

void Tensor::set_scales(Tensor scales, int64_t group) {
  if (scales.dtype() != DType::F32) throw std::invalid_argument("scales must be f32");
  if (ndim() < 1 || group <= 0 || shape_.back() % group != 0)
    throw std::invalid_argument("quantization group " + std::to_string(group) +
                                " does not divide rows of " + shape_str(shape_));
  const int64_t expect = numel() / group;
  if (scales.numel() != expect)
    throw std::invalid_argument("expected " + std::to_string(expect) + " scales, got " +
                                std::to_string(scales.numel()));
  Shape sshape = shape_;
  sshape.back() /= group;
  scales_ = std::make_shared<Tensor>(scales.contiguous().reshape(sshape));
  group_ = group;
}

}  // namespace xdna
