" Vim filetype plugin for shd, the sharded array language of shdc:
" comments are // lines, and :make checks the file with `shdc check`
" (compiler/shdc.vim), its errors in the quickfix list.
if exists("b:did_ftplugin")
  finish
endif
let b:did_ftplugin = 1

setlocal commentstring=//\ %s
setlocal comments=://
setlocal formatoptions-=t formatoptions+=croql
compiler shdc

let b:undo_ftplugin = "setlocal commentstring< comments< formatoptions< makeprg< errorformat<"
