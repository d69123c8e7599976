package systemd

func notifyHelper() error { return nil }
