# test_cuda_module's fixtures: the binaries it inspects, and (CUDA builds) broken stand-ins for
# the CUDA module that EXPERTSCOPE_CUDA_MODULE points at.
if(TARGET expertscope)
  target_compile_definitions(test_cuda_module PRIVATE ES_GUI_PATH="$<TARGET_FILE:expertscope>")
  add_dependencies(test_cuda_module expertscope)
endif()
if(NOT TARGET es_cuda_module)
  return()
endif()
target_compile_definitions(test_cuda_module PRIVATE ES_CUDA_MODULE_PATH="$<TARGET_FILE:es_cuda_module>")
add_library(es_fake_missing_dependency SHARED engine/cuda/fake_missing_dependency.cpp)
set_target_properties(es_fake_missing_dependency PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_dependency)
foreach(kind 1 2 3 4)
  add_library(es_fake_cuda_module_${kind} MODULE engine/cuda/fake_cuda_module.cpp)
  target_compile_definitions(es_fake_cuda_module_${kind} PRIVATE FAKE_KIND=${kind})
  # Headers only (cuda_module_abi.h); nothing of es_engine is linked in.
  target_include_directories(es_fake_cuda_module_${kind} PRIVATE
    $<TARGET_PROPERTY:es_engine,INTERFACE_INCLUDE_DIRECTORIES>)
  target_compile_definitions(es_fake_cuda_module_${kind} PRIVATE
    $<TARGET_PROPERTY:es_engine,INTERFACE_COMPILE_DEFINITIONS>)
  set_target_properties(es_fake_cuda_module_${kind} PROPERTIES LIBRARY_OUTPUT_DIRECTORY
    ${CMAKE_CURRENT_BINARY_DIR}/fake_cuda_modules SKIP_BUILD_RPATH ON)
  target_compile_definitions(test_cuda_module PRIVATE
    ES_FAKE_CUDA_MODULE_${kind}="$<TARGET_FILE:es_fake_cuda_module_${kind}>")
  add_dependencies(test_cuda_module es_fake_cuda_module_${kind})
endforeach()
target_link_libraries(es_fake_cuda_module_4 PRIVATE es_fake_missing_dependency)
