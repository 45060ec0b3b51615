// The CANN runtime on the CPU: one device (the host), synchronous streams, and "device" memory that
// is host memory. Device-side pointers are checked against the live aclrtMalloc blocks, so a program
// that would fault on the NPU fails here with an error code and message instead.
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include "common.h"

namespace {

using spatialgrad::aclnn::record_error;

constexpr size_t kAlignment = 64;

// A stream handle. Work runs synchronously, so it carries no state.
struct Stream {
  int unused = 0;
};

std::mutex state_mutex;
bool initialized = false;
std::map<uintptr_t, size_t> device_blocks;  // start -> size of live aclrtMalloc blocks

aclError fail(aclError code, const std::string& message) {
  record_error(message);
  return code;
}

// Whether [p, p + count) lies inside one live aclrtMalloc block.
bool in_device_block(const void* p, size_t count) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(state_mutex);
  auto it = device_blocks.upper_bound(address);
  if (it == device_blocks.begin()) return false;
  --it;
  const uintptr_t offset = address - it->first;
  return offset <= it->second && count <= it->second - offset;
}

void* aligned_block(size_t size) {
  const size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < size) return nullptr;
  return std::aligned_alloc(kAlignment, rounded);
}

}  // namespace

extern "C" {

size_t aclDataTypeSize(aclDataType dataType) {
  switch (dataType) {
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: case ACL_COMPLEX32: return 4;
    case ACL_DOUBLE: case ACL_INT64: case ACL_UINT64: case ACL_COMPLEX64: return 8;
    case ACL_COMPLEX128: return 16;
    default: return 0;
  }
}

aclError aclInit(const char* /*configPath*/) {
  std::lock_guard<std::mutex> lock(state_mutex);
  if (initialized) return fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit(): already initialized (call aclFinalize first)");
  initialized = true;
  return ACL_SUCCESS;
}

aclError aclFinalize(void) {
  std::lock_guard<std::mutex> lock(state_mutex);
  if (!initialized) return fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize(): not initialized (call aclInit first)");
  initialized = false;
  return ACL_SUCCESS;
}

aclError aclrtSetDevice(int32_t deviceId) {
  if (deviceId < 0) {
    return fail(ACL_ERROR_RT_INVALID_DEVICEID,
                "aclrtSetDevice(): expected deviceId >= 0, but got " + std::to_string(deviceId));
  }
  return ACL_SUCCESS;
}

aclError aclrtResetDevice(int32_t deviceId) {
  if (deviceId < 0) {
    return fail(ACL_ERROR_RT_INVALID_DEVICEID,
                "aclrtResetDevice(): expected deviceId >= 0, but got " + std::to_string(deviceId));
  }
  return ACL_SUCCESS;
}

aclError aclrtGetDeviceCount(uint32_t* count) {
  if (count == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount(): expected count to be non-null");
  *count = 1;
  return ACL_SUCCESS;
}

aclError aclrtCreateStream(aclrtStream* stream) {
  if (stream == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream(): expected stream to be non-null");
  *stream = new (std::nothrow) Stream;
  if (*stream == nullptr) return fail(ACL_ERROR_BAD_ALLOC, "aclrtCreateStream(): out of memory");
  return ACL_SUCCESS;
}

aclError aclrtDestroyStream(aclrtStream stream) {
  auto* s = static_cast<Stream*>(stream);
  if (s == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream(): expected stream to be non-null");
  delete s;
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeStream(aclrtStream /*stream*/) {
  return ACL_SUCCESS;  // every operator finished before its aclnnXxx call returned
}

aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy /*policy*/) {
  if (devPtr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc(): expected devPtr to be non-null");
  *devPtr = nullptr;
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc(): expected size > 0, but got 0");
  void* block = aligned_block(size);
  if (block == nullptr) {
    return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc(): cannot allocate " + std::to_string(size) + " bytes");
  }
  try {
    std::lock_guard<std::mutex> lock(state_mutex);
    device_blocks.emplace(reinterpret_cast<uintptr_t>(block), size);
  } catch (const std::exception&) {
    std::free(block);
    return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc(): out of memory");
  }
  *devPtr = block;
  return ACL_SUCCESS;
}

aclError aclrtFree(void* devPtr) {
  if (devPtr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtFree(): expected devPtr to be non-null");
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    if (device_blocks.erase(reinterpret_cast<uintptr_t>(devPtr)) == 0) {
      return fail(ACL_ERROR_INVALID_PARAM, "aclrtFree(): expected an address returned by aclrtMalloc, but got one "
                                           "that is not (or was already freed)");
    }
  }
  std::free(devPtr);
  return ACL_SUCCESS;
}

aclError aclrtMallocHost(void** hostPtr, size_t size) {
  if (hostPtr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost(): expected hostPtr to be non-null");
  *hostPtr = nullptr;
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost(): expected size > 0, but got 0");
  *hostPtr = aligned_block(size);
  if (*hostPtr == nullptr) {
    return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMallocHost(): cannot allocate " + std::to_string(size) + " bytes");
  }
  return ACL_SUCCESS;
}

aclError aclrtFreeHost(void* hostPtr) {
  if (hostPtr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtFreeHost(): expected hostPtr to be non-null");
  std::free(hostPtr);
  return ACL_SUCCESS;
}

aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
  constexpr const char* kApi = "aclrtMemcpy(): ";
  if (dst == nullptr || src == nullptr) {
    return fail(ACL_ERROR_INVALID_PARAM, std::string(kApi) + "expected dst and src to be non-null");
  }
  if (count > destMax) {
    return fail(ACL_ERROR_INVALID_PARAM, std::string(kApi) + "expected count <= destMax, but got count " +
                                             std::to_string(count) + " > destMax " + std::to_string(destMax));
  }
  bool dst_on_device = false, src_on_device = false;
  const int32_t kind_code = spatialgrad::aclnn::enum_code(kind);  // any int may come from C
  switch (kind_code) {
    case ACL_MEMCPY_HOST_TO_HOST: break;
    case ACL_MEMCPY_HOST_TO_DEVICE: dst_on_device = true; break;
    case ACL_MEMCPY_DEVICE_TO_HOST: src_on_device = true; break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE: dst_on_device = src_on_device = true; break;
    case ACL_MEMCPY_DEFAULT: break;  // the runtime infers the direction: anything goes
    default:
      return fail(ACL_ERROR_INVALID_PARAM,
                  std::string(kApi) + "expected an aclrtMemcpyKind, but got " + std::to_string(kind_code));
  }
  if (dst_on_device && !in_device_block(dst, count)) {
    return fail(ACL_ERROR_INVALID_PARAM, std::string(kApi) + "expected dst to be " + std::to_string(count) +
                                             " bytes inside an aclrtMalloc block, but it is not");
  }
  if (src_on_device && !in_device_block(src, count)) {
    return fail(ACL_ERROR_INVALID_PARAM, std::string(kApi) + "expected src to be " + std::to_string(count) +
                                             " bytes inside an aclrtMalloc block, but it is not");
  }
  if (count != 0) std::memmove(dst, src, count);
  return ACL_SUCCESS;
}

aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  if (devPtr == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset(): expected devPtr to be non-null");
  if (count > maxCount) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset(): expected count <= maxCount, but got " +
                                             std::to_string(count) + " > " + std::to_string(maxCount));
  }
  if (!in_device_block(devPtr, count)) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset(): expected devPtr to be " + std::to_string(count) +
                                             " bytes inside an aclrtMalloc block, but it is not");
  }
  std::memset(devPtr, value, count);
  return ACL_SUCCESS;
}

}  // extern "C"
