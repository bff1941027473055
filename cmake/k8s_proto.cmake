# The Kubernetes protobuf messages (specs/k8s/proto): protoc-c generates C
# descriptors from the vendored .proto files at build time, and
# k8s_pb_tables.cmake lists every message descriptor (the converter's
# apiVersion+kind lookup) and the Go JSON facts of gojson.txt. The result
# is kb_k8s_pb, linked by kb_codec.
find_program(PROTOC_C protoc-c REQUIRED)
pkg_check_modules(PROTOBUF_C REQUIRED IMPORTED_TARGET libprotobuf-c)

set(KB_PROTO_DIR ${CMAKE_SOURCE_DIR}/specs/k8s/proto)
set(KB_PB_OUT ${CMAKE_BINARY_DIR}/generated/pb)
file(GLOB_RECURSE KB_PROTOS CONFIGURE_DEPENDS RELATIVE ${KB_PROTO_DIR} ${KB_PROTO_DIR}/*.proto)
list(SORT KB_PROTOS)
set(KB_PB_SRCS)
set(KB_PB_HDRS)
foreach(p ${KB_PROTOS})
  string(REGEX REPLACE "\\.proto$" "" stem ${p})
  list(APPEND KB_PB_SRCS ${KB_PB_OUT}/${stem}.pb-c.c)
  list(APPEND KB_PB_HDRS ${KB_PB_OUT}/${stem}.pb-c.h)
endforeach()
list(TRANSFORM KB_PROTOS PREPEND ${KB_PROTO_DIR}/ OUTPUT_VARIABLE KB_PROTO_PATHS)
add_custom_command(
  OUTPUT ${KB_PB_SRCS} ${KB_PB_HDRS}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${KB_PB_OUT}
  COMMAND ${PROTOC_C} -I${KB_PROTO_DIR} --c_out=${KB_PB_OUT} ${KB_PROTOS}
  DEPENDS ${KB_PROTO_PATHS}
  WORKING_DIRECTORY ${KB_PROTO_DIR}
  COMMENT "protoc-c: Kubernetes API messages"
  VERBATIM)
add_custom_command(
  OUTPUT ${KB_PB_OUT}/k8s_pb_tables.c
  COMMAND ${CMAKE_COMMAND} -DOUT=${KB_PB_OUT}/k8s_pb_tables.c -DPB_DIR=${KB_PB_OUT}
          "-DHEADERS=${KB_PB_HDRS}" -DFACTS=${KB_PROTO_DIR}/gojson.txt
          -P ${CMAKE_SOURCE_DIR}/cmake/k8s_pb_tables.cmake
  DEPENDS ${KB_PB_HDRS} ${KB_PROTO_DIR}/gojson.txt ${CMAKE_SOURCE_DIR}/cmake/k8s_pb_tables.cmake
  COMMENT "Kubernetes message table"
  VERBATIM)
add_library(kb_k8s_pb STATIC ${KB_PB_SRCS} ${KB_PB_OUT}/k8s_pb_tables.c)
target_include_directories(kb_k8s_pb PUBLIC ${KB_PB_OUT})
# generated code: not ours to keep warning-free
target_compile_options(kb_k8s_pb PRIVATE -w)
target_link_libraries(kb_k8s_pb PUBLIC PkgConfig::PROTOBUF_C)
