" Vim syntax file
" Language:    shd, the sharded array language compiled by shdc
" Maintainer:  the shdc project (editors/vim/syntax/shd.vim)
" Install:     copy editors/vim/{syntax,ftdetect} into ~/.vim/, or
"              `make install`, which puts them under PREFIX/share/vim/vimfiles.
"
" Types carry their sharding: f32[8@X,4@(Y,Z)]<U:W> highlights the dtype,
" each @AXIS, and the U/R/V annotation with its axes.

if exists("b:current_syntax")
  finish
endif

let s:cpo_save = &cpo
set cpo&vim

syn keyword shdStructure   mesh const struct import
syn keyword shdFunctionKw  fn nextgroup=shdFuncName skipwhite
syn keyword shdManual      manual
syn keyword shdDeclaration let var
syn keyword shdConditional if else
syn keyword shdRepeat      for in
syn keyword shdStatement   return
syn keyword shdOperatorKw  as
syn keyword shdBoolean     true false
syn keyword shdDtype       f32 f64 i32 bool bf16

syn match   shdFuncName    "\h\w*" contained

" Built-in functions (global and per-device view).
syn keyword shdBuiltin exp log sin cos tanh sqrt abs relu sigmoid erf rsqrt square sign floor log1p expm1 gelu silu softplus
syn keyword shdBuiltin maximum minimum where sum mean max min cumsum argmax argmin softmax log_softmax logsumexp dot_product_attention sort argsort top_k segment_sum
syn keyword shdBuiltin transpose reshape expand_dims squeeze einsum cast reshard zeros ones full iota normal uniform one_hot
syn keyword shdBuiltin take take_along_axis dynamic_slice dynamic_update_slice concatenate stack split pad
syn keyword shdBuiltin print metrics manifest mkdir keep_last save load load_dim arg clock stop_requested grad value_and_grad chr size exists remat vjp_save vjp_load
" str is also the type of strings: a builtin only where it is called.
syn match   shdBuiltin "\<str\ze\s*("
" Collectives: only inside manual functions.
syn keyword shdCollective psum pmax pmin pmean all_gather psum_scatter all_to_all ppermute axis_index axis_size pcast

" Sharding: 8@X, 8@(X,Y)
syn match   shdShardAt     "@\s*\h\w*" contains=shdAt,shdAxis
syn match   shdShardAt     "@\s*(\s*\h\w*\%(\s*,\s*\h\w*\)*\s*)" contains=shdAt,shdAxis
syn match   shdAt          "@" contained
syn match   shdAxis        "\h\w*" contained
" U/R/V annotations: <U:X>, <R:X,Y>, <V:i>
syn match   shdAnnot       "<\s*[URV]\s*:\s*\h\w*\%(\s*,\s*\h\w*\)*\s*>" contains=shdAnnotKind,shdAxis
syn match   shdAnnotKind   "<\s*[URV]\s*:" contained

syn match   shdNumber      "\<\d\+\>"
syn match   shdFloat       "\<\d\+\.\d\+\%([eE][+-]\=\d\+\)\=\>"
syn match   shdFloat       "\<\d\+[eE][+-]\=\d\+\>"

syn match   shdEscape      +\\[nt\\"]+ contained
syn region  shdString      start=+"+ skip=+\\\\\|\\"+ end=+"+ oneline contains=shdEscape
syn keyword shdTodo        TODO FIXME XXX NOTE contained
syn match   shdComment     "//.*$" contains=shdTodo,@Spell

hi def link shdStructure   Structure
hi def link shdFunctionKw  Keyword
hi def link shdManual      StorageClass
hi def link shdDeclaration Keyword
hi def link shdConditional Conditional
hi def link shdRepeat      Repeat
hi def link shdStatement   Statement
hi def link shdOperatorKw  Operator
hi def link shdBoolean     Boolean
hi def link shdDtype       Type
hi def link shdFuncName    Function
hi def link shdBuiltin     Function
hi def link shdCollective  Special
hi def link shdShardAt     Special
hi def link shdAt          Operator
hi def link shdAnnot       PreProc
hi def link shdAxis        Identifier
hi def link shdAnnotKind   PreProc
hi def link shdNumber      Number
hi def link shdFloat       Float
hi def link shdEscape      SpecialChar
hi def link shdString      String
hi def link shdTodo        Todo
hi def link shdComment     Comment

let b:current_syntax = "shd"

let &cpo = s:cpo_save
unlet s:cpo_save
