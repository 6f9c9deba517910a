# Code in the documentation is compiled and run by the test suite, taken from the Markdown
# itself, so that what a reader sees is what was tested.
#
# The convention (also in docs/README.md):
#   ```cpp                 a fragment: the body of a function, with ember's public headers
#                          included and `using namespace ember` in force. Its `#include`
#                          lines move to the top of the generated file. Each fragment is
#                          one CTest test, "doc: <file>:<line>", that must end without an
#                          exception.
#   ```cpp continued       goes on in the scope of the fragment before it (same test).
#   ```cpp (with int main) a whole program: compiled as it is, into its own executable, and
#                          run; it must exit 0.
#   ```text output         right after a fragment: what it prints on standard output. The
#                          output must match, line by line, trailing spaces ignored; "..."
#                          matches any text within a line, and a line of just "..." any
#                          number of lines.
#   ```text error          right after a fragment: it must throw ember::Error with this
#                          message (the same matching).
#   <!-- cpp hidden        code the reader does not need to see (inputs the text describes,
#   ...                    a model to train), put before the next fragment in its scope.
#   -->
# Any other fence (```text, ```sh, ```console, ```python, ```cmake) is not compiled; ```c++,
# ```cxx and ```cc are refused so that no C++ is left untested by a typo.
#
# Extraction runs when CMake configures; every Markdown file is a configure dependency, so
# editing one re-extracts it at the next build. A document's fragments become one
# executable (doc_<name>), each fragment a function; generated files are rewritten only
# when their text changes.
include_guard(GLOBAL)

# Writes `content` to `path` unless the file already holds exactly that.
function(_ember_doc_write path content)
  if(EXISTS "${path}")
    file(READ "${path}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()

# ember_doc_snippets(DOCS <md files> ROOT <dir the names are relative to>
#                    SUPPORT <dir holding doc_snippet_support.h> LIBRARIES <targets>)
function(ember_doc_snippets)
  cmake_parse_arguments(arg "" "ROOT;SUPPORT" "DOCS;LIBRARIES" ${ARGN})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${arg_DOCS} "${CMAKE_CURRENT_FUNCTION_LIST_FILE}")
  foreach(md IN LISTS arg_DOCS)
    _ember_doc_one("${md}" "${arg_ROOT}" "${arg_SUPPORT}" "${arg_LIBRARIES}")
  endforeach()
endfunction()

# One document: its own function, so that nothing carries over to the next.
function(_ember_doc_one md root support libraries)
    set(arg_ROOT "${root}")
    set(arg_SUPPORT "${support}")
    set(arg_LIBRARIES "${libraries}")
    set(out_dir "${CMAKE_CURRENT_BINARY_DIR}/doc_snippets")
    file(MAKE_DIRECTORY "${out_dir}")
    set(char_SEMI ";")
    set(char_LB "[")
    set(char_RB "]")
    set(char_BS "\\")
    set(last_was_code FALSE)
    set(after_python FALSE)
    file(RELATIVE_PATH rel "${arg_ROOT}" "${md}")
    string(REGEX REPLACE "\\.md$" "" stem "${rel}")
    string(REGEX REPLACE "[^A-Za-z0-9]" "_" stem "${stem}")
    string(TOLOWER "${stem}" stem)

    # One list element per line: ';', '[' and ']' would confuse CMake's lists, so they
    # travel as placeholders and are put back when the code is written out.
    file(READ "${md}" text)
    string(REPLACE ";" "@EMBER_SEMI@" text "${text}")
    string(REPLACE "[" "@EMBER_LB@" text "${text}")
    string(REPLACE "]" "@EMBER_RB@" text "${text}")
    string(REPLACE "\\" "@EMBER_BS@" text "${text}")
    string(REPLACE "\n" ";" lines "${text}")

    set(state outside)       # outside, code, expect, skip, hidden
    set(lineno 0)
    set(n 0)                 # fragments so far
    set(includes "")
    set(bodies "")
    set(hidden "")
    set(programs "")
    foreach(line IN LISTS lines)
      math(EXPR lineno "${lineno} + 1")
      if(state STREQUAL "outside")
        if(line MATCHES "^(```+)([A-Za-z0-9_+-]*)[ \t]*(.*)$")
          string(LENGTH "${CMAKE_MATCH_1}" fence)
          set(lang "${CMAKE_MATCH_2}")
          set(attrs "${CMAKE_MATCH_3}")
          if(lang MATCHES "^(c\\+\\+|C\\+\\+|cxx|cc|CPP)$")
            message(FATAL_ERROR "${rel}:${lineno}: code fenced as ```${lang} is not compiled: fence C++ as ```cpp")
          elseif(lang STREQUAL "cpp")
            set(after_python FALSE)
            math(EXPR start "${lineno} + 1")
            set(code "")
            set(state code)
          elseif(lang STREQUAL "text" AND attrs MATCHES "^(output|error)$" AND after_python)
            set(after_python FALSE)  # a Python fence's output: python/tests/test_doc_python.py checks it
            set(state skip)
          elseif(lang STREQUAL "text" AND attrs MATCHES "^(output|error)$")
            if(n EQUAL 0 OR NOT last_was_code)
              message(FATAL_ERROR "${rel}:${lineno}: a ```text ${attrs} block must follow a ```cpp fragment")
            endif()
            set(kind "${attrs}")
            set(expect "")
            set(state expect)
          else()
            if(lang STREQUAL "python")
              set(after_python TRUE)
            endif()
            set(state skip)
          endif()
        elseif(line MATCHES "^<!-- cpp hidden[ \t]*$")
          math(EXPR hidden_start "${lineno} + 1")
          set(state hidden)
        elseif(NOT line STREQUAL "")
          set(last_was_code FALSE)
          set(after_python FALSE)
        endif()
      elseif(state STREQUAL "hidden")
        if(line MATCHES "^-->[ \t]*$")
          set(state outside)
        else()
          if(hidden STREQUAL "")
            set(hidden "#line ${hidden_start} \"${rel}\"\n")
          endif()
          string(APPEND hidden "${line}\n")
        endif()
      elseif(state STREQUAL "skip")
        # a fence closes with a line of at least as many backticks as opened it
        set(closes FALSE)
        if(line MATCHES "^(```+)[ \t]*$")
          string(LENGTH "${CMAKE_MATCH_1}" closing)
          if(closing GREATER_EQUAL fence)
            set(closes TRUE)
          endif()
        endif()
        if(closes)
          set(state outside)
          set(last_was_code FALSE)
        endif()
      elseif(state STREQUAL "expect")
        if(line MATCHES "^```[ \t]*$")
          set(var "expect_${kind}_${n}")
          string(APPEND ${var} "${expect}")
          set(state outside)
          set(last_was_code FALSE)
        else()
          string(APPEND expect "${line}\n")
        endif()
      elseif(state STREQUAL "code")
        if(line MATCHES "^```[ \t]*$")
          set(state outside)
          set(last_was_code TRUE)
          if(code MATCHES "(^|\n)[ \t]*int[ \t]+main[ \t]*\\(")
            # A whole program: its own file and executable.
            if(NOT hidden STREQUAL "")
              message(FATAL_ERROR "${rel}:${lineno}: hidden code cannot go before a whole program")
            endif()
            list(LENGTH programs p)
            set(src "${out_dir}/doc_${stem}_program${p}.cpp")
            set(file_text "// Generated from ${rel} by cmake/DocSnippets.cmake: edit the Markdown, not this.\n#line ${start} \"${rel}\"\n${code}")
            list(APPEND programs "${start}")
            set(program_src_${p} "${src}")
            set(program_text_${p} "${file_text}")
            set(last_was_code FALSE)
          elseif(attrs STREQUAL "continued")
            if(n EQUAL 0)
              message(FATAL_ERROR "${rel}:${lineno}: ```cpp continued with no fragment before it")
            endif()
            if(DEFINED expect_error_${n})
              message(FATAL_ERROR "${rel}:${lineno}: a fragment cannot go on after the error it throws")
            endif()
            string(APPEND body_${n} "${hidden}#line ${start} \"${rel}\"\n${code}")
            set(hidden "")
          elseif(attrs STREQUAL "")
            math(EXPR n "${n} + 1")
            set(line_${n} "${start}")
            set(body_${n} "${hidden}#line ${start} \"${rel}\"\n${code}")
            set(hidden "")
          else()
            message(FATAL_ERROR "${rel}:${lineno}: unknown ```cpp attribute '${attrs}' (continued, or nothing)")
          endif()
        elseif(line MATCHES "^[ \t]*#[ \t]*include[ \t]")
          string(APPEND includes "${line}\n")
          string(APPEND code "\n")   # keeps the lines numbered as in the Markdown
        else()
          string(APPEND code "${line}\n")
        endif()
      endif()
    endforeach()
    if(NOT state STREQUAL "outside")
      message(FATAL_ERROR "${rel}: a fence or hidden block is not closed")
    endif()
    if(NOT hidden STREQUAL "")
      message(FATAL_ERROR "${rel}: hidden code with no fragment after it")
    endif()

    # The fragments: one file, one executable, one test each.
    if(n GREATER 0)
      set(cpp "// Generated from ${rel} by cmake/DocSnippets.cmake: edit the Markdown, not this.\n")
      string(APPEND cpp "#include \"doc_snippet_support.h\"\n${includes}\n")
      set(table "")
      foreach(i RANGE 1 ${n})
        string(APPEND cpp "namespace snippet_${i} {\nusing namespace ember;\nvoid run() {\n${body_${i}}}\n}  // namespace snippet_${i}\n")
        set(kind none)
        set(expect "")
        if(DEFINED expect_output_${i})
          set(kind output)
          set(expect "${expect_output_${i}}")
        endif()
        if(DEFINED expect_error_${i})
          set(kind error)
          set(expect "${expect_error_${i}}")
        endif()
        string(APPEND table "    {\"${rel}:${line_${i}}\", &snippet_${i}::run, ember::doc::Expect::${kind}, R\"ember_doc(${expect})ember_doc\"},\n")
      endforeach()
      string(APPEND cpp "\nint main(int argc, char** argv) {\n  static const ember::doc::Snippet snippets[] = {\n${table}  };\n")
      string(APPEND cpp "  return ember::doc::run_snippets(snippets, argc, argv);\n}\n")
      foreach(placeholder IN ITEMS SEMI LB RB BS)
        string(REPLACE "@EMBER_${placeholder}@" "${char_${placeholder}}" cpp "${cpp}")
      endforeach()
      _ember_doc_write("${out_dir}/doc_${stem}.cpp" "${cpp}")

      set(target doc_${stem})
      add_executable(${target} "${out_dir}/doc_${stem}.cpp")
      target_include_directories(${target} PRIVATE "${arg_SUPPORT}")
      target_link_libraries(${target} PRIVATE ${arg_LIBRARIES})
      target_compile_options(${target} PRIVATE -Wall -Wno-unused-variable -Wno-unused-but-set-variable)
      # MPI's plugins keep allocations until exit, out of LeakSanitizer's sight (as for the
      # dist tests): leak checking is off for a document whose code starts MPI.
      set(env "OMP_WAIT_POLICY=PASSIVE")
      if(EMBER_SANITIZE AND cpp MATCHES "dist::init")
        list(APPEND env "ASAN_OPTIONS=detect_leaks=0")
      endif()
      foreach(i RANGE 1 ${n})
        add_test(NAME "doc: ${rel}:${line_${i}}" COMMAND ${target} ${i}
                 WORKING_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}")
        set_tests_properties("doc: ${rel}:${line_${i}}" PROPERTIES ENVIRONMENT "${env}" TIMEOUT 120)
      endforeach()
    endif()

    # Whole programs.
    set(p 0)
    foreach(start IN LISTS programs)
      set(file_text "${program_text_${p}}")
      foreach(placeholder IN ITEMS SEMI LB RB BS)
        string(REPLACE "@EMBER_${placeholder}@" "${char_${placeholder}}" file_text "${file_text}")
      endforeach()
      _ember_doc_write("${program_src_${p}}" "${file_text}")
      set(target doc_${stem}_program${p})
      add_executable(${target} "${program_src_${p}}")
      target_link_libraries(${target} PRIVATE ${arg_LIBRARIES})
      add_test(NAME "doc: ${rel}:${start}" COMMAND ${target} WORKING_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}")
      set_tests_properties("doc: ${rel}:${start}" PROPERTIES ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE" TIMEOUT 120)
      math(EXPR p "${p} + 1")
    endforeach()
endfunction()
