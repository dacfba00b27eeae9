
stories260KOnce upon a time*Jreq-1