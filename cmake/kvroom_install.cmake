function(kvroom_install_stub)
endfunction()
