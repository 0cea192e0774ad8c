// empty.cpp - keeps ddp_test_support a valid library while tests/support/ has no other sources.
