" Vim compiler file for shdc: `:compiler shdc` (the shd ftplugin sets it),
" then `:make` runs `shdc check` on the current file and lists its errors,
" warnings and notes (FILE:LINE:COL: error: MESSAGE [CODE]) in the
" quickfix list; the source lines, carets and help lines under each are
" left out. `:make -I DIR` passes options on.
if exists("current_compiler")
  finish
endif
let current_compiler = "shdc"
if exists(":CompilerSet") != 2
  command -nargs=* CompilerSet setlocal <args>
endif

CompilerSet makeprg=shdc\ check\ $*\ %:S
CompilerSet errorformat=%f:%l:%c:\ %trror:\ %m,%f:%l:%c:\ %tarning:\ %m,%f:%l:%c:\ %tote:\ %m,%-G%.%#
