// empty.cpp - keeps ddp_models a valid library before any model exists.
