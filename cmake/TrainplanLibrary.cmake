# trainplan_library(NAME <lib> [SOURCES ...] [DEPS ...] [PRIVATE_DEPS ...])
#
# Declares the library of one top-level folder: target `trainplan_<lib>` with alias
# `trainplan::<lib>`, public headers in <lib>/include/trainplan/<lib>/, private code in
# <lib>/src/. DEPS are the allowed edges of ARCHITECTURE.md (other trainplan libraries),
# so an include across a missing edge fails to build.
function(trainplan_library)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(target trainplan_${ARG_NAME})
  # A folder whose code has not been written yet, or whose dependencies are missing, is
  # left out of the build (and says so) rather than breaking the configure.
  if(NOT ARG_SOURCES)
    message(STATUS "library ${ARG_NAME}: no sources yet, not built")
    return()
  endif()
  foreach(dep IN LISTS ARG_DEPS)
    if(NOT TARGET trainplan_${dep})
      message(STATUS "library ${ARG_NAME}: needs ${dep}, not built")
      return()
    endif()
  endforeach()
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(trainplan::${ARG_NAME} ALIAS ${target})
  target_include_directories(${target}
    PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  foreach(dep IN LISTS ARG_DEPS)
    target_link_libraries(${target} PUBLIC trainplan::${dep})
  endforeach()
  target_link_libraries(${target} PRIVATE ${ARG_PRIVATE_DEPS})
  # The libraries are also linked into the Python module (python/), a shared object; the
  # programs and tests stay position-dependent.
  if(TRAINPLAN_WITH_PYTHON)
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
  trainplan_warnings(${target})
endfunction()

function(trainplan_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
      -Wcast-align -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough>)
endfunction()

# trainplan_embed_files(OUT <cpp> NAMESPACE <ns> FUNCTION <fn> BASE <dir> FILES ...)
# Generates a C++ source whose function <ns>::<fn>() returns the files as
# (relative path, contents) pairs, so the binary carries its catalogs and needs no
# install step. Paths are relative to BASE's parent (e.g. "hwprofiles/catalog/p4.json")
# so that error messages name the file as it sits in the repository.
function(trainplan_embed_files)
  cmake_parse_arguments(ARG "" "OUT;NAMESPACE;FUNCTION;ROOT" "FILES" ${ARGN})
  add_custom_command(
    OUTPUT ${ARG_OUT}
    COMMAND ${CMAKE_COMMAND}
      -DOUT=${ARG_OUT} -DNAMESPACE=${ARG_NAMESPACE} -DFUNCTION=${ARG_FUNCTION}
      -DROOT=${ARG_ROOT} "-DFILES=${ARG_FILES}"
      -P ${PROJECT_SOURCE_DIR}/cmake/EmbedFiles.cmake
    DEPENDS ${ARG_FILES} ${PROJECT_SOURCE_DIR}/cmake/EmbedFiles.cmake
    COMMENT "Embedding ${ARG_FUNCTION} data files"
    VERBATIM)
endfunction()
