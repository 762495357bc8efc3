# lens_add_part(): one part of lens (DESIGN.md, "Parts") as a target of its own.
#
#   lens_add_part(<name> [STATIC]
#                 SOURCES <files in the part's folder>
#                 HEADERS <public headers of this part, names in include/lens/>
#                 DEPENDS <parts below this one>
#                 LINK    <libraries only this part links>)
#
# Makes lens_<name>_objects, an OBJECT library that the top-level
# CMakeLists.txt packs into liblens (or into an adapter's library); with
# STATIC, the static library lens_<name> instead, for parts outside the
# installed library; without SOURCES, lens_<name>_headers, an interface
# target of headers alone. What a part
# sees is what keeps the layering: its compile has on its include path
#   - its own folder (its private headers),
#   - build/parts/<name>/include, holding links to its own public headers only,
#   - the same two of every part it DEPENDS on (transitively).
# So `#include "lens/otlp_http_exporter.h"` in a core file fails to compile:
# that header is not on the core's path. include/lens/ stays the one flat
# folder users and the install see; every header in it must belong to
# exactly one part (checked by lens_check_part_headers).
set(LENS_WARNINGS -Wall -Wextra -Wpedantic)

function(lens_add_part name)
  cmake_parse_arguments(P "STATIC" "" "SOURCES;HEADERS;DEPENDS;LINK" ${ARGN})
  set(tree ${PROJECT_BINARY_DIR}/parts/${name}/include)
  file(REMOVE_RECURSE ${tree})
  file(MAKE_DIRECTORY ${tree}/lens)
  foreach(h ${P_HEADERS})
    set(source ${PROJECT_SOURCE_DIR}/include/lens/${h})
    if(NOT EXISTS ${source})
      set(source ${PROJECT_BINARY_DIR}/generated/lens/${h})
    endif()
    if(NOT EXISTS ${source})
      message(FATAL_ERROR "lens part ${name}: header lens/${h} does not exist")
    endif()
    file(CREATE_LINK ${source} ${tree}/lens/${h} SYMBOLIC)
  endforeach()
  if(NOT P_SOURCES)
    # Headers only (names every part shares): an interface target.
    set(target lens_${name}_headers)
    add_library(${target} INTERFACE)
    set_property(GLOBAL PROPERTY LENS_PART_TARGET_${name} ${target})
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${tree}>)
    set_property(GLOBAL APPEND PROPERTY LENS_PART_HEADERS ${P_HEADERS})
    return()
  elseif(P_STATIC)
    set(target lens_${name})
    add_library(${target} STATIC ${P_SOURCES})
  else()
    set(target lens_${name}_objects)
    add_library(${target} OBJECT ${P_SOURCES})
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
  set_property(GLOBAL PROPERTY LENS_PART_TARGET_${name} ${target})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${tree}>
                                              $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}>)
  foreach(d ${P_DEPENDS})
    get_property(below GLOBAL PROPERTY LENS_PART_TARGET_${d})
    if(NOT below)
      message(FATAL_ERROR "lens part ${name} depends on ${d}, which is not a part (yet)")
    endif()
    target_link_libraries(${target} PUBLIC ${below})
  endforeach()
  if(P_LINK)
    target_link_libraries(${target} PRIVATE ${P_LINK})
  endif()
  set_property(GLOBAL APPEND PROPERTY LENS_PART_HEADERS ${P_HEADERS})
endfunction()

# Fails the configure step if a public header belongs to no part, or to two.
function(lens_check_part_headers)
  get_property(owned GLOBAL PROPERTY LENS_PART_HEADERS)
  file(GLOB present RELATIVE ${PROJECT_SOURCE_DIR}/include/lens ${PROJECT_SOURCE_DIR}/include/lens/*.h)
  foreach(h ${present})
    list(FIND owned ${h} at)
    if(at EQUAL -1)
      message(FATAL_ERROR "include/lens/${h} belongs to no part: name it in the HEADERS of one "
                          "src/<part>/CMakeLists.txt")
    endif()
  endforeach()
  set(seen "")
  foreach(h ${owned})
    list(FIND seen ${h} at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "lens/${h} is named by two parts")
    endif()
    list(APPEND seen ${h})
  endforeach()
endfunction()
