# oomsnap_bpf_skeleton(NAME OBJECT): `bpftool gen skeleton` at build time, from the
# CO-RE object to ${CMAKE_BINARY_DIR}/skel/NAME.skel.h (struct NAME_bpf).
# Called from bpf/CMakeLists.txt so object and skeleton rules live in one
# directory (make/ninja cannot follow custom-command outputs across directories).
function(oomsnap_bpf_skeleton name obj out_var)
  set(hdr ${CMAKE_BINARY_DIR}/skel/${name}.skel.h)
  add_custom_command(
    OUTPUT ${hdr}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/skel
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name}_bpf > ${hdr}.tmp
    COMMAND ${CMAKE_COMMAND} -E rename ${hdr}.tmp ${hdr}
    DEPENDS ${obj}
    COMMENT "Skeleton ${name}.skel.h")
  set(${out_var} ${hdr} PARENT_SCOPE)
endfunction()
