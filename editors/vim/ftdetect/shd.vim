" Vim filetype detection for shd, the sharded array language of shdc.
autocmd BufRead,BufNewFile *.shd setfiletype shd
