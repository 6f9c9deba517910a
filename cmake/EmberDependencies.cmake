# Finds ember's dependencies: OpenBLAS (cblas, OpenMP build preferred so that BLAS calls
# made inside our OpenMP regions do not start a second thread pool), OpenMP, HDF5, zlib, and
# MPI when there (ember::dist runs on it; a world of one process without it).
# Used both by the build and by the installed package configuration, which defines
# HDF5::HDF5 itself beforehand (FindHDF5 compiles a C program, and a project that finds
# the package may have enabled C++ only). Every other lookup here needs C++ alone.
include_guard(GLOBAL)

find_package(OpenMP REQUIRED COMPONENTS CXX)
if(NOT TARGET HDF5::HDF5)
  find_package(HDF5 REQUIRED COMPONENTS C)
endif()
find_package(ZLIB REQUIRED)  # CRC-32 of checkpoint files
find_package(MPI COMPONENTS CXX QUIET)

# Debian installs several OpenBLAS builds side by side; take the OpenMP one when present.
find_path(EMBER_CBLAS_INCLUDE_DIR cblas.h
  HINTS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
  PATH_SUFFIXES openblas)
find_library(EMBER_OPENBLAS_LIBRARY NAMES openblas
  HINTS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp)
if(NOT EMBER_CBLAS_INCLUDE_DIR OR NOT EMBER_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "ember: OpenBLAS not found (apt-get install libopenblas-openmp-dev)")
endif()
get_filename_component(EMBER_OPENBLAS_DIR ${EMBER_OPENBLAS_LIBRARY} DIRECTORY)

# The same build as a static archive, for a shared module that must keep its own copy
# (the Python module: see below), and the Fortran runtime its LAPACK part calls (which the
# shared library names itself)
find_library(EMBER_OPENBLAS_STATIC NAMES libopenblas.a NO_DEFAULT_PATH PATHS ${EMBER_OPENBLAS_DIR})
find_library(EMBER_GFORTRAN_LIBRARY NAMES libgfortran.so.5 gfortran)
if(NOT EMBER_GFORTRAN_LIBRARY)
  unset(EMBER_OPENBLAS_STATIC)
endif()

if(NOT TARGET ember_openblas)
  add_library(ember_openblas INTERFACE IMPORTED)
  target_include_directories(ember_openblas INTERFACE ${EMBER_CBLAS_INCLUDE_DIR})
  # A target with the property EMBER_PRIVATE_OPENBLAS (the Python module) links the static
  # archive and keeps its symbols to itself: a process that loads the module beside another
  # OpenBLAS build (PyTorch's and NumPy's libblas.so.3, often the pthread build) then holds
  # two copies that never mix. With one shared libopenblas.so.0 the first loaded wins the
  # name: ember on the pthread build, or the pthread build's interface driving the OpenMP
  # build's threads (which hangs). Every other target links the shared library; the run
  # path makes the loader pick this OpenBLAS build, whatever the system default is.
  set(private "$<BOOL:$<TARGET_PROPERTY:EMBER_PRIVATE_OPENBLAS>>")
  if(EMBER_OPENBLAS_STATIC)
    get_filename_component(static_real ${EMBER_OPENBLAS_STATIC} REALPATH)
    get_filename_component(static_real_name ${static_real} NAME)
    target_link_libraries(ember_openblas INTERFACE
      "$<${private}:${static_real};${EMBER_GFORTRAN_LIBRARY};-Wl,--exclude-libs,${static_real_name}>"
      "$<$<NOT:${private}>:${EMBER_OPENBLAS_LIBRARY};-Wl,-rpath,${EMBER_OPENBLAS_DIR}>")
  else()
    target_link_libraries(ember_openblas INTERFACE ${EMBER_OPENBLAS_LIBRARY} "-Wl,-rpath,${EMBER_OPENBLAS_DIR}")
  endif()
endif()
