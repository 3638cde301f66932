" Writes, for every character of the current buffer, its line, column,
" highlight group (after links) and syntax item to the file $OUT, the
" filetype first. Used by tests/tools/test_editors.py.
let s:out = [&filetype]
for s:l in range(1, line('$'))
  let s:text = getline(s:l)
  for s:c in range(1, len(s:text))
    let s:id = synID(s:l, s:c, 1)
    call add(s:out, s:l . ' ' . s:c . ' ' . synIDattr(synIDtrans(s:id), 'name') . ' ' . synIDattr(s:id, 'name'))
  endfor
endfor
call writefile(s:out, $OUT)
qall!
