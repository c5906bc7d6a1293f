# Read by cpack at packaging time: DT_CPACK_COMPONENTS (e.g. "main") limits the packages built, so a quick
# check can leave out deltatune-cuda-libs (about 600 MB of cuBLAS to compress).
if(DEFINED ENV{DT_CPACK_COMPONENTS})
  string(REPLACE "," ";" CPACK_COMPONENTS_ALL "$ENV{DT_CPACK_COMPONENTS}")
endif()
