# ember_add_library: what every library of ember has in common, said once.
#
#   ember_add_library(<name> [INSTALL] [NATIVE] SOURCES <source>...
#                     [PRIVATE_HEADERS <header>...])
#
# Makes the target ember_<name> and its alias ember::<name>. Its headers, and every header
# of the tree, are included by their path from the source root ("core/ops.h",
# "lib/text/text.h"); a target linking it gets that include directory too.
#   INSTALL          a library of the installed package (core, nn, optim, io, dist): built
#                    with warnings on, exported as ember::<name> (emberTargets), and its
#                    folder's headers installed in include/ember/<name>, where the package's
#                    users find them by the same paths. Without it, a library of the
#                    programs (lib/): always static, never installed.
#   NATIVE           tuned for the build machine's processor when EMBER_NATIVE is on (the
#                    libraries with row kernels).
#   PRIVATE_HEADERS  headers of the folder that are not installed (shared by its sources
#                    only).
# Dependencies are the caller's: target_link_libraries(ember_<name> ...) after the call.
include_guard(GLOBAL)

function(ember_add_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "INSTALL;NATIVE" "" "SOURCES;PRIVATE_HEADERS")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_SOURCES)
    message(FATAL_ERROR "ember_add_library(${name}): expected [INSTALL] [NATIVE] SOURCES <source>... "
      "[PRIVATE_HEADERS <header>...], got: ${ARGN}")
  endif()
  set(target ember_${name})
  if(arg_INSTALL)
    add_library(${target} ${arg_SOURCES})
  else()
    add_library(${target} STATIC ${arg_SOURCES})
  endif()
  add_library(ember::${name} ALIAS ${target})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  if(arg_INSTALL)
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  endif()
  if(arg_NATIVE AND EMBER_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
  if(NOT arg_INSTALL)
    return()
  endif()

  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(${target} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/ember>)
  install(TARGETS ${target} EXPORT emberTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  file(GLOB headers ${CMAKE_CURRENT_SOURCE_DIR}/*.h)
  foreach(header IN LISTS arg_PRIVATE_HEADERS)
    list(REMOVE_ITEM headers ${CMAKE_CURRENT_SOURCE_DIR}/${header})
  endforeach()
  install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember/${name})
endfunction()
