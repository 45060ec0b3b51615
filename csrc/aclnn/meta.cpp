// The aclnn tensor and array objects (aclnn/acl_meta.h). Creation only records what it is given;
// operators validate tensors (dtype, format, view inside storage) in their phase one.
#include <new>

#include "common.h"

namespace {

using spatialgrad::aclnn::record_error;

template <class Object, class T>
Object* new_array(const char* api, const T* value, uint64_t size) {
  if (value == nullptr && size != 0) {
    record_error(std::string(api) + "(): expected value to be non-null for size " + std::to_string(size) +
                 ", but got null");
    return nullptr;
  }
  Object* array = new (std::nothrow) Object;
  if (array == nullptr) return nullptr;
  try {
    array->values.assign(value, value + size);
  } catch (const std::exception&) {
    delete array;
    record_error(std::string(api) + "(): out of memory");
    return nullptr;
  }
  return array;
}

template <class Object, class Array>
aclnnStatus get_size(const char* api, const Array* array, uint64_t* size) {
  return spatialgrad::aclnn::guarded(api, [&] {
    spatialgrad::aclnn::check_not_null(api, "array", array);
    spatialgrad::aclnn::check_not_null(api, "size", size);
    *size = static_cast<uint64_t>(array->values.size());
  });
}

}  // namespace

extern "C" {

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType, const int64_t* stride,
                           int64_t offset, aclFormat format, const int64_t* storageDims, uint64_t storageDimsNum,
                           void* tensorData) {
  constexpr const char* kApi = "aclCreateTensor";
  if ((viewDims == nullptr && viewDimsNum != 0) || (storageDims == nullptr && storageDimsNum != 0)) {
    record_error(std::string(kApi) + "(): expected viewDims and storageDims to be non-null when their counts are "
                                     "non-zero, but got null");
    return nullptr;
  }
  if (offset < 0) {
    record_error(std::string(kApi) + "(): expected offset >= 0, but got " + std::to_string(offset));
    return nullptr;
  }
  try {
    auto tensor = std::make_unique<aclTensor>();
    tensor->view_shape.assign(viewDims, viewDims + viewDimsNum);
    if (stride != nullptr) {
      tensor->strides.assign(stride, stride + viewDimsNum);
    } else {
      // No strides given: contiguous (row-major) over the view shape.
      tensor->strides = spatialgrad::contiguous_strides(tensor->view_shape);
    }
    tensor->offset = offset;
    tensor->dtype = spatialgrad::aclnn::enum_code(dataType);  // not loaded as the enum: any int is allowed here
    tensor->format = spatialgrad::aclnn::enum_code(format);
    tensor->storage_shape.assign(storageDims, storageDims + storageDimsNum);
    tensor->data = tensorData;
    return tensor.release();
  } catch (const std::exception&) {
    record_error(std::string(kApi) + "(): out of memory");
    return nullptr;
  }
}

aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  delete tensor;  // null is allowed, as in CANN
  return ACLNN_SUCCESS;
}

aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  return new_array<aclIntArray>("aclCreateIntArray", value, size);
}
aclFloatArray* aclCreateFloatArray(const float* value, uint64_t size) {
  return new_array<aclFloatArray>("aclCreateFloatArray", value, size);
}
aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size) {
  return new_array<aclBoolArray>("aclCreateBoolArray", value, size);
}

aclnnStatus aclDestroyIntArray(const aclIntArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyFloatArray(const aclFloatArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyBoolArray(const aclBoolArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}

aclnnStatus aclGetIntArraySize(const aclIntArray* array, uint64_t* size) {
  return get_size<aclIntArray>("aclGetIntArraySize", array, size);
}
aclnnStatus aclGetFloatArraySize(const aclFloatArray* array, uint64_t* size) {
  return get_size<aclFloatArray>("aclGetFloatArraySize", array, size);
}
aclnnStatus aclGetBoolArraySize(const aclBoolArray* array, uint64_t* size) {
  return get_size<aclBoolArray>("aclGetBoolArraySize", array, size);
}

}  // extern "C"
