# docs/design.md's layer order, enforced: a header may include its own layer and the layers above it.
find_program(ACCEL_PYTHON3 python3 REQUIRED)
add_test(NAME layering COMMAND ${ACCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/layering/check_layers.py
                               ${PROJECT_SOURCE_DIR}/include)
