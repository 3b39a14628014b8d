# The Debian package (CPack DEB): `cpack -G DEB` in a release build directory, or
# scripts/package.sh. Layout: binaries in /usr/bin, mount helpers in /usr/sbin, the default
# config as a conffile in /etc/clio, systemd units in /lib/systemd/system, sysusers.d and
# tmpfiles.d entries, a man page per program, docs in /usr/share/doc/clio.
include(GNUInstallDirs)

# The mount helpers (/usr/sbin/mount.fuse.clio, mount.clio) are installed by fs/CMakeLists.txt.
install(FILES etc/clio.yaml DESTINATION /etc/clio PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
        COMPONENT package)
install(FILES etc/systemd/clio-runtime.service etc/systemd/clio-fuse@.service DESTINATION /lib/systemd/system COMPONENT package)
install(FILES etc/sysusers.d/clio.conf DESTINATION lib/sysusers.d COMPONENT package)
install(FILES etc/tmpfiles.d/clio.conf DESTINATION lib/tmpfiles.d COMPONENT package)

# Man pages and the Debian changelog, gzipped reproducibly (-n: no name or time stamp).
set(CLIO_PKG_GEN ${CMAKE_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${CLIO_PKG_GEN})
set(CLIO_PKG_GZ)
foreach(page clio_run.8 clioctl.8 clio-fuse.8)
  add_custom_command(OUTPUT ${CLIO_PKG_GEN}/${page}.gz
                     COMMAND gzip -9n -c ${CMAKE_SOURCE_DIR}/packaging/man/${page} > ${CLIO_PKG_GEN}/${page}.gz
                     DEPENDS ${CMAKE_SOURCE_DIR}/packaging/man/${page} VERBATIM)
  list(APPEND CLIO_PKG_GZ ${CLIO_PKG_GEN}/${page}.gz)
  install(FILES ${CLIO_PKG_GEN}/${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man8 COMPONENT package)
endforeach()
# The mount helpers are clio-fuse: so is their page.
foreach(helper mount.fuse.clio mount.clio)
  install(CODE "file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_MANDIR}/man8\")
    file(CREATE_LINK clio-fuse.8.gz \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_MANDIR}/man8/${helper}.8.gz\" SYMBOLIC)"
    COMPONENT package)
endforeach()
add_custom_command(OUTPUT ${CLIO_PKG_GEN}/changelog.Debian.gz
                   COMMAND gzip -9n -c ${CMAKE_SOURCE_DIR}/packaging/debian/changelog > ${CLIO_PKG_GEN}/changelog.Debian.gz
                   DEPENDS ${CMAKE_SOURCE_DIR}/packaging/debian/changelog VERBATIM)
list(APPEND CLIO_PKG_GZ ${CLIO_PKG_GEN}/changelog.Debian.gz)
add_custom_target(clio_package_files ALL DEPENDS ${CLIO_PKG_GZ})
install(FILES ${CLIO_PKG_GEN}/changelog.Debian.gz packaging/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT package)
install(FILES README.md docs/safe-bdev.md docs/object-tiers.md docs/metrics.md docs/ipc.md docs/write-a-module.md docs/http-api.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT package)
# runtime.module_dir, root's (the package installs as root), with the example module in it.
install(TARGETS clio_stats LIBRARY DESTINATION lib/clio/modules COMPONENT package)
# The Grafana board, for operators to import (etc/grafana/README.md).
install(FILES etc/grafana/clio-dashboard.json DESTINATION ${CMAKE_INSTALL_DATADIR}/clio/grafana COMPONENT package)
# bash-completion loads completions/<command> on first use: one file, under both names.
foreach(cmd clioctl clio_run)
  install(FILES etc/bash-completion/clioctl DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
          RENAME ${cmd} COMPONENT package)
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME clio)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "CLIO developers <clio-dev@example.org>")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "tiered-storage filesystem over RAM, GPU memory, NVMe and object stores")
set(CPACK_PACKAGE_DESCRIPTION "CLIO mounts a FUSE filesystem whose files become blobs that a placement engine
keeps on storage tiers (host RAM, GPU memory, NVMe files, S3/GCS buckets, and
erasure-coded arrays of several devices) inside a runtime daemon; clioctl
manages tiers and arrays, and systemd units run it all.")
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# systemd-sysusers and systemd-tmpfiles make the clio user and directories in postinst.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3, systemd | systemd-standalone-sysusers")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/packaging/debian/conffiles ${CMAKE_SOURCE_DIR}/packaging/debian/postinst
    ${CMAKE_SOURCE_DIR}/packaging/debian/prerm ${CMAKE_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
