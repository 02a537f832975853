// Tensor: a typed, shaped view into a Buffer. Copying a Tensor copies the view, not the data.
//
// Plain dtypes (f32, f16, bf16, i32) have arbitrary element strides. Block dtypes (int4, bfp16,
// the GGML formats) are stored as contiguous rows of blocks: only the outermost dimensions may be
// strided, the last dimension is always packed. int8/int4 tensors carry their dequantization
// scales as a second f32 tensor of shape [rows, cols / group].
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"

namespace xdna {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;

  // New owning tensor (uninitialised / zero-filled).
  static Tensor empty(const Shape& shape, DType dtype = DType::F32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32);
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  // View of bytes someone else owns (a mapped file); the buffer is kept alive by the view.
  static Tensor view(std::shared_ptr<Buffer> buffer, size_t byte_offset, const Shape& shape,
                     DType dtype);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const;  // negative i counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  int64_t nbytes() const;  // bytes of the packed data (contiguous tensors)
  bool defined() const { return buffer_ != nullptr; }
  bool is_contiguous() const;
  bool writable() const { return buffer_ && buffer_->writable(); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  size_t byte_offset() const { return offset_; }

  std::byte* raw() const { return buffer_->data() + offset_; }
  template <typename T>
  T* data() const { return reinterpret_cast<T*>(raw()); }

  // Views (share the buffer).
  Tensor reshape(const Shape& shape) const;  // contiguous only; one dimension may be -1
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor transpose(int64_t d0, int64_t d1) const;  // plain dtypes only
  Tensor row(int64_t i) const { return slice(0, i, i + 1).reshape(Shape(shape_.begin() + 1, shape_.end())); }

  // Copies.
  Tensor contiguous() const;  // same dtype, packed
  Tensor clone() const;
  std::vector<float> to_vector() const;  // dequantized values in logical order (any dtype)

  // Quantization side data (int8 / int4).
  const std::shared_ptr<Tensor>& scales() const { return scales_; }
  int64_t group_size() const { return group_; }
  void set_scales(Tensor scales, int64_t group);

 private:
  DType dtype_ = DType::F32;
  Shape shape_;
  Shape strides_;  // in elements for plain dtypes; in blocks-of-row units are never needed
  std::shared_ptr<Buffer> buffer_;
  size_t offset_ = 0;
  std::shared_ptr<Tensor> scales_;
  int64_t group_ = 0;
};

Shape contiguous_strides(const Shape& shape);

}  // namespace xdna
