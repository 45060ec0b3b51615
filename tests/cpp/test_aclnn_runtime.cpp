// The acl runtime emulation, tensor/array objects, executors and error messages (no operator maths).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "acl/acl.h"
#include "aclnn_test_util.h"
#include "aclnnop/aclnn_avgpool2d_backward.h"

namespace aclnn_testing {
namespace {

TEST(AclnnRuntime, EnumsAndCodesHaveCannValues) {
  EXPECT_EQ(ACL_SUCCESS, 0);
  EXPECT_EQ(ACLNN_SUCCESS, 0);
  EXPECT_EQ(ACLNN_ERR_PARAM_NULLPTR, 161001);
  EXPECT_EQ(ACLNN_ERR_PARAM_INVALID, 161002);
  EXPECT_EQ(ACLNN_ERR_RUNTIME_ERROR, 361001);
  EXPECT_EQ(ACLNN_ERR_INNER, 561000);
  EXPECT_EQ(ACL_ERROR_INVALID_PARAM, 100000);
  EXPECT_EQ(ACL_ERROR_REPEAT_INITIALIZE, 100002);
  EXPECT_EQ(ACL_FLOAT, 0);
  EXPECT_EQ(ACL_FLOAT16, 1);
  EXPECT_EQ(ACL_INT32, 3);
  EXPECT_EQ(ACL_INT64, 9);
  EXPECT_EQ(ACL_DOUBLE, 11);
  EXPECT_EQ(ACL_BOOL, 12);
  EXPECT_EQ(ACL_BF16, 27);
  EXPECT_EQ(ACL_FORMAT_NCHW, 0);
  EXPECT_EQ(ACL_FORMAT_NHWC, 1);
  EXPECT_EQ(ACL_FORMAT_ND, 2);
  EXPECT_EQ(ACL_FORMAT_NCL, 47);
  EXPECT_EQ(ACL_MEM_MALLOC_HUGE_FIRST, 0);
  EXPECT_EQ(ACL_MEMCPY_HOST_TO_HOST, 0);
  EXPECT_EQ(ACL_MEMCPY_HOST_TO_DEVICE, 1);
  EXPECT_EQ(ACL_MEMCPY_DEVICE_TO_HOST, 2);
  EXPECT_EQ(ACL_MEMCPY_DEVICE_TO_DEVICE, 3);
  // The samples spell enumerators with the type name.
  EXPECT_EQ(aclFormat::ACL_FORMAT_ND, 2);
  EXPECT_EQ(aclDataType::ACL_FLOAT, 0);
  EXPECT_EQ(aclDataTypeSize(ACL_FLOAT), 4u);
  EXPECT_EQ(aclDataTypeSize(ACL_BF16), 2u);
  EXPECT_EQ(aclDataTypeSize(ACL_DOUBLE), 8u);
}

TEST(AclnnRuntime, InitFinalizeAndDevices) {
  EXPECT_ACL_STATUS(aclInit(nullptr), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclInit(nullptr), ACL_ERROR_REPEAT_INITIALIZE, "aclInit(): already initialized");
  EXPECT_ACL_STATUS(aclrtSetDevice(0), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtSetDevice(-1), ACL_ERROR_RT_INVALID_DEVICEID, "expected deviceId >= 0, but got -1");
  uint32_t count = 0;
  EXPECT_ACL_STATUS(aclrtGetDeviceCount(&count), ACL_SUCCESS, "");
  EXPECT_EQ(count, 1u);
  EXPECT_ACL_STATUS(aclrtResetDevice(0), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclFinalize(), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE, "aclFinalize(): not initialized");
  // Initialising again after finalising works.
  EXPECT_ACL_STATUS(aclInit(nullptr), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclFinalize(), ACL_SUCCESS, "");
}

TEST(AclnnRuntime, Streams) {
  aclrtStream stream = nullptr;
  EXPECT_ACL_STATUS(aclrtCreateStream(&stream), ACL_SUCCESS, "");
  EXPECT_NE(stream, nullptr);
  EXPECT_ACL_STATUS(aclrtSynchronizeStream(stream), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtSynchronizeStream(nullptr), ACL_SUCCESS, "");  // the default stream
  EXPECT_ACL_STATUS(aclrtDestroyStream(stream), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtCreateStream(nullptr), ACL_ERROR_INVALID_PARAM, "expected stream to be non-null");
  EXPECT_ACL_STATUS(aclrtDestroyStream(nullptr), ACL_ERROR_INVALID_PARAM, "expected stream to be non-null");
}

TEST(AclnnRuntime, MallocMemcpyFree) {
  const std::vector<float> host{1.5f, -2.0f, 3.25f, 4.0f, 5.0f};
  const size_t bytes = host.size() * sizeof(float);
  void* a = nullptr;
  void* b = nullptr;
  EXPECT_ACL_STATUS(aclrtMalloc(&a, bytes, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtMalloc(&b, bytes, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS, "");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_ACL_STATUS(aclrtMemcpy(a, bytes, host.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtMemcpy(b, bytes, a, bytes, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_SUCCESS, "");
  std::vector<float> back(host.size(), 0.0f), copy(host.size(), 0.0f);
  EXPECT_ACL_STATUS(aclrtMemcpy(back.data(), bytes, b, bytes, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS, "");
  EXPECT_EQ(back, host);
  EXPECT_ACL_STATUS(aclrtMemcpy(copy.data(), bytes, host.data(), bytes, ACL_MEMCPY_HOST_TO_HOST), ACL_SUCCESS, "");
  EXPECT_EQ(copy, host);
  // A copy into the middle of a block, up to its end, is inside it.
  EXPECT_ACL_STATUS(aclrtMemcpy(static_cast<char*>(a) + 4, bytes - 4, host.data(), bytes - 4, ACL_MEMCPY_HOST_TO_DEVICE),
                    ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtMemset(a, bytes, 0, bytes), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtMemcpy(back.data(), bytes, a, bytes, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS, "");
  EXPECT_EQ(back, std::vector<float>(host.size(), 0.0f));

  // Errors: count > destMax, device side outside any block, bad kind, null pointers.
  EXPECT_ACL_STATUS(aclrtMemcpy(a, bytes - 1, host.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM,
                    "expected count <= destMax");
  EXPECT_ACL_STATUS(aclrtMemcpy(static_cast<char*>(a) + 4, bytes, host.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE),
                    ACL_ERROR_INVALID_PARAM, "expected dst to be 20 bytes inside an aclrtMalloc block");
  EXPECT_ACL_STATUS(aclrtMemcpy(copy.data(), bytes, back.data(), bytes, ACL_MEMCPY_DEVICE_TO_HOST),
                    ACL_ERROR_INVALID_PARAM, "expected src to be 20 bytes inside an aclrtMalloc block");
  EXPECT_ACL_STATUS(aclrtMemcpy(a, bytes, host.data(), bytes, static_cast<aclrtMemcpyKind>(99)),
                    ACL_ERROR_INVALID_PARAM, "expected an aclrtMemcpyKind, but got 99");
  EXPECT_ACL_STATUS(aclrtMemcpy(nullptr, bytes, host.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE),
                    ACL_ERROR_INVALID_PARAM, "expected dst and src to be non-null");
  void* none = reinterpret_cast<void*>(0x1);
  EXPECT_ACL_STATUS(aclrtMalloc(&none, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM, "expected size > 0");
  EXPECT_EQ(none, nullptr);
  EXPECT_ACL_STATUS(aclrtMalloc(nullptr, 4, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM,
                    "expected devPtr to be non-null");

  EXPECT_ACL_STATUS(aclrtFree(a), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtFree(a), ACL_ERROR_INVALID_PARAM, "expected an address returned by aclrtMalloc");
  EXPECT_ACL_STATUS(aclrtMemcpy(b, bytes, host.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtFree(b), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtFree(nullptr), ACL_ERROR_INVALID_PARAM, "expected devPtr to be non-null");

  void* pinned = nullptr;
  EXPECT_ACL_STATUS(aclrtMallocHost(&pinned, 16), ACL_SUCCESS, "");
  EXPECT_ACL_STATUS(aclrtFreeHost(pinned), ACL_SUCCESS, "");
}

TEST(AclnnRuntime, RecentErrorMessageIsClearedAndNewestFirst) {
  EXPECT_EQ(aclGetRecentErrMsg(), nullptr);  // nothing failed on this thread yet (or it was read)
  aclrtSetDevice(-1);
  aclrtFree(nullptr);
  const char* message = aclGetRecentErrMsg();
  ASSERT_NE(message, nullptr);
  const std::string text(message);
  EXPECT_EQ(text.find("aclrtFree()"), 0u) << text;  // the newest failure comes first
  EXPECT_NE(text.find("aclrtSetDevice()"), std::string::npos) << text;
  EXPECT_EQ(aclGetRecentErrMsg(), nullptr);  // reading clears
}

TEST(AclnnRuntime, RecentErrorMessageIsPerThread) {
  aclrtSetDevice(-7);
  std::string other_thread = "unset";
  std::thread([&] {
    const char* m = aclGetRecentErrMsg();
    other_thread = m == nullptr ? "" : m;
  }).join();
  EXPECT_EQ(other_thread, "");
  EXPECT_NE(take_error_message().find("got -7"), std::string::npos);
}

TEST(AclnnRuntime, TensorAndArrayObjects) {
  const std::vector<int64_t> shape{2, 3};
  float data[6] = {};
  aclTensor* t = aclCreateTensor(shape.data(), 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, shape.data(), 2, data);
  EXPECT_NE(t, nullptr);
  EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyTensor(nullptr), ACLNN_SUCCESS);
  aclGetRecentErrMsg();
  EXPECT_EQ(aclCreateTensor(nullptr, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, shape.data(), 2, data), nullptr);
  EXPECT_NE(take_error_message().find("aclCreateTensor(): expected viewDims and storageDims to be non-null"),
            std::string::npos);
  EXPECT_EQ(aclCreateTensor(shape.data(), 2, ACL_FLOAT, nullptr, -1, ACL_FORMAT_ND, shape.data(), 2, data), nullptr);
  EXPECT_NE(take_error_message().find("expected offset >= 0, but got -1"), std::string::npos);

  const int64_t ints[3] = {1, 2, 3};
  const float floats[2] = {0.5f, 1.5f};
  const bool bools[2] = {true, false};
  aclIntArray* ia = aclCreateIntArray(ints, 3);
  aclFloatArray* fa = aclCreateFloatArray(floats, 2);
  aclBoolArray* ba = aclCreateBoolArray(bools, 2);
  aclIntArray* empty = aclCreateIntArray(nullptr, 0);
  ASSERT_NE(ia, nullptr);
  ASSERT_NE(fa, nullptr);
  ASSERT_NE(ba, nullptr);
  ASSERT_NE(empty, nullptr);
  uint64_t size = 0;
  EXPECT_EQ(aclGetIntArraySize(ia, &size), ACLNN_SUCCESS);
  EXPECT_EQ(size, 3u);
  EXPECT_EQ(aclGetFloatArraySize(fa, &size), ACLNN_SUCCESS);
  EXPECT_EQ(size, 2u);
  EXPECT_EQ(aclGetBoolArraySize(ba, &size), ACLNN_SUCCESS);
  EXPECT_EQ(size, 2u);
  EXPECT_EQ(aclGetIntArraySize(empty, &size), ACLNN_SUCCESS);
  EXPECT_EQ(size, 0u);
  EXPECT_ACL_STATUS(aclGetIntArraySize(nullptr, &size), ACLNN_ERR_PARAM_NULLPTR,
                    "aclGetIntArraySize(): expected array to be non-null");
  EXPECT_ACL_STATUS(aclGetIntArraySize(ia, nullptr), ACLNN_ERR_PARAM_NULLPTR, "expected size to be non-null");
  EXPECT_EQ(aclCreateIntArray(nullptr, 2), nullptr);
  EXPECT_NE(take_error_message().find("aclCreateIntArray(): expected value to be non-null"), std::string::npos);
  EXPECT_EQ(aclDestroyIntArray(ia), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyFloatArray(fa), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyBoolArray(ba), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyIntArray(empty), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyIntArray(nullptr), ACLNN_SUCCESS);
}

// A valid avg_pool2d backward call, to exercise the executor life cycle.
struct TinyPool {
  HostTensor<float> grad_output{{1, 1, 1, 1}, ACL_FLOAT, {4.0f}};
  HostTensor<float> self{{1, 1, 2, 2}, ACL_FLOAT};
  HostTensor<float> grad_input{{1, 1, 2, 2}, ACL_FLOAT};
  IntArray kernel{{2, 2}};
  IntArray padding{{0}};

  aclnnStatus plan(aclOpExecutor** executor, uint64_t* workspace) {
    return aclnnAvgPool2dBackwardGetWorkspaceSize(grad_output.tensor, self.tensor, kernel.array, nullptr,
                                                  padding.array, false, true, 0, 0, grad_input.tensor, workspace,
                                                  executor);
  }
};

TEST(AclnnExecutor, SingleUseByDefault) {
  TinyPool pool;
  uint64_t workspace = 123;
  aclOpExecutor* executor = nullptr;
  EXPECT_ACL_STATUS(pool.plan(&executor, &workspace), ACLNN_SUCCESS, "");
  EXPECT_EQ(workspace, 0u);
  ASSERT_NE(executor, nullptr);
  // Phase two reads the data at run time: changes between the phases are seen.
  pool.grad_output.storage[0] = 8.0f;
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackward(nullptr, workspace, executor, nullptr), ACLNN_SUCCESS, "");
  EXPECT_EQ(pool.grad_input.storage, std::vector<float>(4, 2.0f));
  // The executor was consumed.
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackward(nullptr, 0, executor, nullptr), ACLNN_ERR_PARAM_INVALID,
                    "unknown or already used executor");
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackward(nullptr, 0, nullptr, nullptr), ACLNN_ERR_PARAM_NULLPTR,
                    "aclnnAvgPool2dBackward(): expected executor to be non-null, but got null");
}

TEST(AclnnExecutor, RepeatableRunsAgainUntilDestroyed) {
  TinyPool pool;
  uint64_t workspace = 0;
  aclOpExecutor* executor = nullptr;
  ASSERT_EQ(pool.plan(&executor, &workspace), ACLNN_SUCCESS);
  EXPECT_ACL_STATUS(aclSetAclOpExecutorRepeatable(executor), ACLNN_SUCCESS, "");
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackward(nullptr, 0, executor, nullptr), ACLNN_SUCCESS, "");
  EXPECT_EQ(pool.grad_input.storage, std::vector<float>(4, 1.0f));
  pool.grad_output.storage[0] = -4.0f;
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackward(nullptr, 0, executor, nullptr), ACLNN_SUCCESS, "");
  EXPECT_EQ(pool.grad_input.storage, std::vector<float>(4, -1.0f));
  EXPECT_ACL_STATUS(aclDestroyAclOpExecutor(executor), ACLNN_SUCCESS, "");
  EXPECT_ACL_STATUS(aclDestroyAclOpExecutor(executor), ACLNN_ERR_PARAM_INVALID, "unknown or already freed");
  EXPECT_ACL_STATUS(aclDestroyAclOpExecutor(nullptr), ACLNN_ERR_PARAM_NULLPTR, "expected executor to be non-null");
  EXPECT_ACL_STATUS(aclSetAclOpExecutorRepeatable(nullptr), ACLNN_ERR_PARAM_NULLPTR,
                    "expected executor to be non-null");
}

// Two threads start phase two of one single-use executor at once, many times: exactly one runs it, the
// other gets 161002 (before, the test and the removal were two locked steps: both could pass the test,
// and one then used the executor the other had freed).
TEST(AclnnExecutor, TwoThreadsRacingOnOneExecutorRunItOnce) {
  for (int round = 0; round < 200; ++round) {
    TinyPool pool;
    uint64_t workspace = 0;
    aclOpExecutor* executor = nullptr;
    ASSERT_EQ(pool.plan(&executor, &workspace), ACLNN_SUCCESS);
    std::atomic<int> arrived{0};
    aclnnStatus status[2];
    std::string message[2];
    auto race = [&](int k) {
      arrived.fetch_add(1);
      while (arrived.load() < 2) {
      }
      status[k] = aclnnAvgPool2dBackward(nullptr, 0, executor, nullptr);
      message[k] = take_error_message();
    };
    std::thread first(race, 0), second(race, 1);
    first.join();
    second.join();
    const int winner = status[0] == ACLNN_SUCCESS ? 0 : 1;
    ASSERT_EQ(status[winner], ACLNN_SUCCESS) << message[winner];
    ASSERT_EQ(status[1 - winner], ACLNN_ERR_PARAM_INVALID) << "round " << round;
    EXPECT_NE(message[1 - winner].find("unknown or already used executor"), std::string::npos) << message[1 - winner];
    EXPECT_EQ(pool.grad_input.storage, std::vector<float>(4, 1.0f));
  }
}

// A repeatable executor run by one thread while another destroys it: the destroy waits for no run
// (it fails while one is in progress) and no run uses a freed executor.
TEST(AclnnExecutor, DestroyRacingWithRunsOfARepeatableExecutor) {
  for (int round = 0; round < 50; ++round) {
    TinyPool pool;
    uint64_t workspace = 0;
    aclOpExecutor* executor = nullptr;
    ASSERT_EQ(pool.plan(&executor, &workspace), ACLNN_SUCCESS);
    ASSERT_EQ(aclSetAclOpExecutorRepeatable(executor), ACLNN_SUCCESS);
    std::atomic<bool> destroyed{false};
    std::vector<aclnnStatus> runs;
    std::thread runner([&] {
      for (int i = 0; i < 20; ++i) runs.push_back(aclnnAvgPool2dBackward(nullptr, 0, executor, nullptr));
      take_error_message();
    });
    std::thread destroyer([&] {
      while (aclDestroyAclOpExecutor(executor) != ACLNN_SUCCESS) {
      }
      destroyed = true;
      take_error_message();
    });
    runner.join();
    destroyer.join();
    EXPECT_TRUE(destroyed);
    bool gone = false;  // once a run fails, the executor was destroyed: every later run fails too
    for (aclnnStatus st : runs) {
      EXPECT_TRUE(st == ACLNN_SUCCESS || st == ACLNN_ERR_PARAM_INVALID);
      if (gone) EXPECT_EQ(st, ACLNN_ERR_PARAM_INVALID);
      gone = gone || st != ACLNN_SUCCESS;
    }
  }
}

// Enum arguments are checked as integers: a C caller may pass any int (UBSan: load of an invalid enum value).
// aclCreateTensor as a C caller sees it: enum parameters are ints in the C ABI, and C allows any value.
// (Calling through this type keeps the test itself from loading 999 as the enum, which UBSan flags.)
using CreateTensorWithCodes = aclTensor* (*)(const int64_t*, uint64_t, int32_t, const int64_t*, int64_t, int32_t,
                                              const int64_t*, uint64_t, void*);
using MemcpyWithCode = aclError (*)(void*, size_t, const void*, size_t, int32_t);

TEST(AclnnTensor, UnknownDtypeAndFormatCodesAreErrors) {
  TinyPool pool;
  const auto create = reinterpret_cast<CreateTensorWithCodes>(&aclCreateTensor);
  const std::vector<int64_t> shape{1, 1, 1, 1}, strides{1, 1, 1, 1}, storage{1};
  float value = 1.0f;
  aclTensor* odd_dtype = create(shape.data(), 4, 999, strides.data(), 0, ACL_FORMAT_ND, storage.data(), 1, &value);
  aclTensor* odd_format = create(shape.data(), 4, ACL_FLOAT, strides.data(), 0, 999, storage.data(), 1, &value);
  uint64_t workspace = 0;
  aclOpExecutor* executor = nullptr;
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackwardGetWorkspaceSize(odd_dtype, pool.self.tensor, pool.kernel.array, nullptr,
                                                           pool.padding.array, false, true, 0, 0,
                                                           pool.grad_input.tensor, &workspace, &executor),
                    ACLNN_ERR_PARAM_INVALID, "expected gradOutput to have dtype ACL_FLOAT16, ACL_BF16, ACL_FLOAT, "
                                             "ACL_DOUBLE, but got an unknown aclDataType code");
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackwardGetWorkspaceSize(odd_format, pool.self.tensor, pool.kernel.array, nullptr,
                                                           pool.padding.array, false, true, 0, 0,
                                                           pool.grad_input.tensor, &workspace, &executor),
                    ACLNN_ERR_PARAM_INVALID, "but got an unknown aclFormat code");
  aclDestroyTensor(odd_dtype);
  aclDestroyTensor(odd_format);
  const auto memcpy_with_code = reinterpret_cast<MemcpyWithCode>(&aclrtMemcpy);
  float source = 2.0f;
  EXPECT_ACL_STATUS(memcpy_with_code(&value, 4, &source, 4, 999), ACL_ERROR_INVALID_PARAM,
                    "expected an aclrtMemcpyKind, but got 999");
}

// Outputs that share memory with each other or with an input the operator reads are refused; sharing
// with an argument that lends only its shape (avg_pool2d's self) is allowed.
TEST(AclnnTensor, OutputsMustNotOverlapReadInputs) {
  TinyPool pool;
  uint64_t workspace = 0;
  aclOpExecutor* executor = nullptr;
  AliasTensor over_grad_output({1, 1, 2, 2}, ACL_FLOAT, pool.grad_output.storage.data());
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackwardGetWorkspaceSize(pool.grad_output.tensor, pool.self.tensor,
                                                           pool.kernel.array, nullptr, pool.padding.array, false, true,
                                                           0, 0, over_grad_output.tensor, &workspace, &executor),
                    ACLNN_ERR_PARAM_INVALID, "expected gradInput not to overlap the input gradOutput");
  AliasTensor over_self({1, 1, 2, 2}, ACL_FLOAT, pool.self.storage.data());
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackwardGetWorkspaceSize(pool.grad_output.tensor, pool.self.tensor,
                                                           pool.kernel.array, nullptr, pool.padding.array, false, true,
                                                           0, 0, over_self.tensor, &workspace, &executor),
                    ACLNN_SUCCESS, "");
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackward(nullptr, 0, executor, nullptr), ACLNN_SUCCESS, "");
  EXPECT_EQ(pool.self.storage, std::vector<float>(4, 1.0f));
}

TEST(AclnnExecutor, FailedPlanningHandsOutNoExecutor) {
  TinyPool pool;
  uint64_t workspace = 99;
  aclOpExecutor* executor = reinterpret_cast<aclOpExecutor*>(0x1);
  IntArray bad_kernel{{0}};
  EXPECT_ACL_STATUS(aclnnAvgPool2dBackwardGetWorkspaceSize(pool.grad_output.tensor, pool.self.tensor, bad_kernel.array,
                                                           nullptr, pool.padding.array, false, true, 0, 0,
                                                           pool.grad_input.tensor, &workspace, &executor),
                    ACLNN_ERR_PARAM_INVALID, "kernel_size");
  EXPECT_EQ(executor, nullptr);
  EXPECT_EQ(workspace, 0u);
  EXPECT_ACL_STATUS(pool.plan(nullptr, &workspace), ACLNN_ERR_PARAM_NULLPTR,
                    "aclnnAvgPool2dBackwardGetWorkspaceSize(): expected executor to be non-null, but got null");
  EXPECT_ACL_STATUS(pool.plan(&executor, nullptr), ACLNN_ERR_PARAM_NULLPTR,
                    "aclnnAvgPool2dBackwardGetWorkspaceSize(): expected workspaceSize to be non-null, but got null");
}

}  // namespace
}  // namespace aclnn_testing
