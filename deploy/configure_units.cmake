# Run by `cmake --install` (and by cpack): writes the systemd units and the
# package's postinst with the paths of this install, whose prefix is known
# only now (`--prefix` may differ from the configured one).
#   In: COHORT_DEPLOY_SOURCE, COHORT_DEPLOY_BINARY, COHORT_BINDIR, COHORT_DATADIR,
#       COHORT_DOCDIR, COHORT_LIBDIR_SYSTEMD, COHORT_LIBDIR_SYSUSERS (relative
#       to the prefix), CMAKE_INSTALL_PREFIX.
foreach(dir BIN DATA DOC)
  set(rel "${COHORT_${dir}DIR}")
  if(IS_ABSOLUTE "${rel}")
    set(full "${rel}")
  else()
    set(full "${CMAKE_INSTALL_PREFIX}/${rel}")
  endif()
  set(COHORT_${dir}_FULL "${full}")
endforeach()
set(COHORT_BIN_DIR "${COHORT_BIN_FULL}")
set(COHORT_SHARE_DIR "${COHORT_DATA_FULL}/cohort")
set(COHORT_DOC_DIR "${COHORT_DOC_FULL}")
set(COHORT_SYSUSERS_FILE "${CMAKE_INSTALL_PREFIX}/${COHORT_LIBDIR_SYSUSERS}/cohort.conf")
set(out "${COHORT_DEPLOY_BINARY}/configured")
foreach(unit cohort-coordinator cohort-agent)
  configure_file("${COHORT_DEPLOY_SOURCE}/systemd/${unit}.service.in" "${out}/${unit}.service" @ONLY)
endforeach()
configure_file("${COHORT_DEPLOY_SOURCE}/debian/postinst.in" "${out}/postinst" @ONLY)
file(INSTALL "${out}/cohort-coordinator.service" "${out}/cohort-agent.service"
     DESTINATION "${CMAKE_INSTALL_PREFIX}/${COHORT_LIBDIR_SYSTEMD}")
