#include <iostream>
#include <vector>
#include "acl/acl.h"
#include "aclnnop/aclnn_multi_scale_deformable_attention_grad.h"

#define CHECK_RET(cond, return_expr) \
  do {                               \
    if (!(cond)) {                   \
      return_expr;                   \
    }                                \
  } while (0)

#define LOG_PRINT(message, ...)     \
  do {                              \
    printf(message, ##__VA_ARGS__); \
  } while (0)

int64_t GetShapeSize(const std::vector<int64_t>& shape) {
  int64_t shapeSize = 1;
  for (auto i : shape) {
    shapeSize *= i;
  }
  return shapeSize;
}

int Init(int32_t deviceId, aclrtStream* stream) {
  // 固定写法,AscendCL初始化 (fixed: initialise AscendCL)
  auto ret = aclInit(nullptr);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
  ret = aclrtSetDevice(deviceId);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
  ret = aclrtCreateStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);
  return 0;
}

template <typename T>
int CreateAclTensor(const std::vector<T>& hostData, const std::vector<int64_t>& shape, void** deviceAddr,
                    aclDataType dataType, aclTensor** tensor) {
  auto size = GetShapeSize(shape) * sizeof(T);
  // 调用aclrtMalloc申请device侧内存 (allocate device memory)
  auto ret = aclrtMalloc(deviceAddr, size, ACL_MEM_MALLOC_HUGE_FIRST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
  // 调用aclrtMemcpy将host侧数据拷贝到device侧内存上 (copy host data to the device)
  ret = aclrtMemcpy(*deviceAddr, size, hostData.data(), size, ACL_MEMCPY_HOST_TO_DEVICE);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
  // 计算连续tensor的strides (strides of a contiguous tensor)
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = shape.size() - 2; i >= 0; i--) {
    strides[i] = shape[i + 1] * strides[i + 1];
  }
  // 调用aclCreateTensor接口创建aclTensor (create the aclTensor)
  *tensor = aclCreateTensor(shape.data(), shape.size(), dataType, strides.data(), 0, aclFormat::ACL_FORMAT_ND,
                            shape.data(), shape.size(), *deviceAddr);
  return 0;
}

int main() {
  // 1. (固定写法)device/stream初始化 (fixed: device/stream initialisation)
  int32_t deviceId = 0;
  aclrtStream stream;
  auto ret = Init(deviceId, &stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

  // 2. 构造输入与输出 (build inputs and outputs): bs 1, two levels (2x2 and 1x2, so 6 value rows),
  // 2 heads of 8 channels, 2 queries, 2 points per level and head.
  int64_t bs = 1, numKeys = 6, numHeads = 2, channels = 8, numQueries = 2, numLevels = 2, numPoints = 2;
  std::vector<int64_t> valueShape = {bs, numKeys, numHeads, channels};
  std::vector<int64_t> spatialShapeShape = {numLevels, 2};
  std::vector<int64_t> levelStartIndexShape = {numLevels};
  std::vector<int64_t> locationShape = {bs, numQueries, numHeads, numLevels, numPoints, 2};
  std::vector<int64_t> attnWeightShape = {bs, numQueries, numHeads, numLevels, numPoints};
  std::vector<int64_t> gradOutputShape = {bs, numQueries, numHeads, channels};
  void* valueDeviceAddr = nullptr;
  void* spatialShapeDeviceAddr = nullptr;
  void* levelStartIndexDeviceAddr = nullptr;
  void* locationDeviceAddr = nullptr;
  void* attnWeightDeviceAddr = nullptr;
  void* gradOutputDeviceAddr = nullptr;
  void* gradValueDeviceAddr = nullptr;
  void* gradLocationDeviceAddr = nullptr;
  void* gradAttnWeightDeviceAddr = nullptr;
  aclTensor* value = nullptr;
  aclTensor* spatialShape = nullptr;
  aclTensor* levelStartIndex = nullptr;
  aclTensor* location = nullptr;
  aclTensor* attnWeight = nullptr;
  aclTensor* gradOutput = nullptr;
  aclTensor* gradValue = nullptr;
  aclTensor* gradLocation = nullptr;
  aclTensor* gradAttnWeight = nullptr;
  std::vector<float> valueHostData(GetShapeSize(valueShape), 0);
  for (size_t i = 0; i < valueHostData.size(); i++) {
    valueHostData[i] = static_cast<float>(i % 11) * 0.25f - 1.0f;
  }
  std::vector<int64_t> spatialShapeHostData = {2, 2, 1, 2};
  std::vector<int64_t> levelStartIndexHostData = {0, 4};
  // Sampling locations in [0, 1] (x first), some of them outside the level's pixels.
  std::vector<float> locationHostData(GetShapeSize(locationShape), 0);
  for (size_t i = 0; i < locationHostData.size(); i++) {
    locationHostData[i] = static_cast<float>((i * 37) % 100) / 100.0f;
  }
  std::vector<float> attnWeightHostData(GetShapeSize(attnWeightShape), 0);
  for (size_t i = 0; i < attnWeightHostData.size(); i++) {
    attnWeightHostData[i] = static_cast<float>(i % 4 + 1) * 0.125f;
  }
  std::vector<float> gradOutputHostData(GetShapeSize(gradOutputShape), 0);
  for (size_t i = 0; i < gradOutputHostData.size(); i++) {
    gradOutputHostData[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
  }
  std::vector<float> gradValueHostData(GetShapeSize(valueShape), 0);
  std::vector<float> gradLocationHostData(GetShapeSize(locationShape), 0);
  std::vector<float> gradAttnWeightHostData(GetShapeSize(attnWeightShape), 0);
  ret = CreateAclTensor(valueHostData, valueShape, &valueDeviceAddr, aclDataType::ACL_FLOAT, &value);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(spatialShapeHostData, spatialShapeShape, &spatialShapeDeviceAddr, aclDataType::ACL_INT64,
                        &spatialShape);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(levelStartIndexHostData, levelStartIndexShape, &levelStartIndexDeviceAddr,
                        aclDataType::ACL_INT64, &levelStartIndex);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(locationHostData, locationShape, &locationDeviceAddr, aclDataType::ACL_FLOAT, &location);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(attnWeightHostData, attnWeightShape, &attnWeightDeviceAddr, aclDataType::ACL_FLOAT,
                        &attnWeight);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(gradOutputHostData, gradOutputShape, &gradOutputDeviceAddr, aclDataType::ACL_FLOAT,
                        &gradOutput);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(gradValueHostData, valueShape, &gradValueDeviceAddr, aclDataType::ACL_FLOAT, &gradValue);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(gradLocationHostData, locationShape, &gradLocationDeviceAddr, aclDataType::ACL_FLOAT,
                        &gradLocation);
  CHECK_RET(ret == ACL_SUCCESS, return ret);
  ret = CreateAclTensor(gradAttnWeightHostData, attnWeightShape, &gradAttnWeightDeviceAddr, aclDataType::ACL_FLOAT,
                        &gradAttnWeight);
  CHECK_RET(ret == ACL_SUCCESS, return ret);

  // 3. 调用CANN算子库API (call the operator)
  uint64_t workspaceSize = 0;
  aclOpExecutor* executor;
  // 第一段接口 (phase one)
  ret = aclnnMultiScaleDeformableAttentionGradGetWorkspaceSize(value, spatialShape, levelStartIndex, location,
                                                               attnWeight, gradOutput, gradValue, gradLocation,
                                                               gradAttnWeight, &workspaceSize, &executor);
  CHECK_RET(ret == ACL_SUCCESS,
            LOG_PRINT("aclnnMultiScaleDeformableAttentionGradGetWorkspaceSize failed. ERROR: %d\n", ret);
            return ret);
  // 根据第一段接口计算出的workspaceSize申请device内存 (allocate the workspace)
  void* workspaceAddr = nullptr;
  if (workspaceSize > 0) {
    ret = aclrtMalloc(&workspaceAddr, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
  }
  // 第二段接口 (phase two)
  ret = aclnnMultiScaleDeformableAttentionGrad(workspaceAddr, workspaceSize, executor, stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnMultiScaleDeformableAttentionGrad failed. ERROR: %d\n", ret);
            return ret);

  // 4. (固定写法)同步等待任务执行结束 (fixed: wait for the stream)
  ret = aclrtSynchronizeStream(stream);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

  // 5. 获取输出的值 (copy the results back to the host and print them)
  auto gradValueSize = GetShapeSize(valueShape);
  std::vector<float> gradValueResultData(gradValueSize, 0);
  ret = aclrtMemcpy(gradValueResultData.data(), gradValueSize * sizeof(float), gradValueDeviceAddr,
                    gradValueSize * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy gradValue from device to host failed. ERROR: %d\n", ret); return ret);
  for (int64_t i = 0; i < gradValueSize; i++) {
    LOG_PRINT("gradValueResultData[%ld] is: %f\n", i, gradValueResultData[i]);
  }
  auto gradLocationSize = GetShapeSize(locationShape);
  std::vector<float> gradLocationResultData(gradLocationSize, 0);
  ret = aclrtMemcpy(gradLocationResultData.data(), gradLocationSize * sizeof(float), gradLocationDeviceAddr,
                    gradLocationSize * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy gradLocation from device to host failed. ERROR: %d\n", ret);
            return ret);
  for (int64_t i = 0; i < gradLocationSize; i++) {
    LOG_PRINT("gradLocationResultData[%ld] is: %f\n", i, gradLocationResultData[i]);
  }
  auto gradAttnWeightSize = GetShapeSize(attnWeightShape);
  std::vector<float> gradAttnWeightResultData(gradAttnWeightSize, 0);
  ret = aclrtMemcpy(gradAttnWeightResultData.data(), gradAttnWeightSize * sizeof(float), gradAttnWeightDeviceAddr,
                    gradAttnWeightSize * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST);
  CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("copy gradAttnWeight from device to host failed. ERROR: %d\n", ret);
            return ret);
  for (int64_t i = 0; i < gradAttnWeightSize; i++) {
    LOG_PRINT("gradAttnWeightResultData[%ld] is: %f\n", i, gradAttnWeightResultData[i]);
  }

  // 6. 释放aclTensor (destroy tensors)
  aclDestroyTensor(value);
  aclDestroyTensor(spatialShape);
  aclDestroyTensor(levelStartIndex);
  aclDestroyTensor(location);
  aclDestroyTensor(attnWeight);
  aclDestroyTensor(gradOutput);
  aclDestroyTensor(gradValue);
  aclDestroyTensor(gradLocation);
  aclDestroyTensor(gradAttnWeight);

  // 7. 释放device资源 (free device resources)
  aclrtFree(valueDeviceAddr);
  aclrtFree(spatialShapeDeviceAddr);
  aclrtFree(levelStartIndexDeviceAddr);
  aclrtFree(locationDeviceAddr);
  aclrtFree(attnWeightDeviceAddr);
  aclrtFree(gradOutputDeviceAddr);
  aclrtFree(gradValueDeviceAddr);
  aclrtFree(gradLocationDeviceAddr);
  aclrtFree(gradAttnWeightDeviceAddr);
  if (workspaceSize > 0) {
    aclrtFree(workspaceAddr);
  }
  aclrtDestroyStream(stream);
  aclrtResetDevice(deviceId);
  aclFinalize();
  return 0;
}
