"""Operations: systemd notify, $SYS, metrics, the HTTP status page, reload (see DESIGN.md)."""
